import Foundation
import Synchronization

/// A timestamp a busy loop refreshes each time round (`beat()`), so that a liveness probe can tell a
/// wedged loop from a working one by its age. One atomic store per beat: cheap enough for every
/// iteration of an event loop or a poll loop.
///
/// Heartbeats registered with `Heartbeats.shared` are what `/healthz` reads (see `LivenessPolicy`).
public final class Heartbeat: Sendable {
    /// What beats: `kafka-consumer-poll`, `http2-server-0`, …
    public let name: String
    private let lastBeat: Atomic<UInt64>

    /// A heartbeat that beat just now.
    public init(name: String) {
        self.name = name
        self.lastBeat = Atomic(Heartbeat.monotonicNanoseconds())
    }

    /// Records that the loop came round now.
    public func beat() {
        lastBeat.store(Heartbeat.monotonicNanoseconds(), ordering: .relaxed)
    }

    /// Time since the last beat.
    public var age: Duration {
        let now = Heartbeat.monotonicNanoseconds()
        let last = lastBeat.load(ordering: .relaxed)
        return .nanoseconds(Int64(now > last ? now - last : 0))
    }

    /// Nanoseconds on `CLOCK_MONOTONIC`.
    public static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}
