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

/// The heartbeats of a process. Loops register theirs when they start and remove them when they
/// end on purpose (a closed consumer is not a wedged one).
public final class Heartbeats: Sendable {
    /// The process-wide set, read by the admin port's `/healthz`.
    public static let shared = Heartbeats()

    private let registered = Mutex<[ObjectIdentifier: Heartbeat]>([:])

    /// An empty set (tests make their own).
    public init() {}

    /// Adds a heartbeat named `name` and returns it.
    public func register(_ name: String) -> Heartbeat {
        let heartbeat = Heartbeat(name: name)
        registered.withLock { $0[ObjectIdentifier(heartbeat)] = heartbeat }
        return heartbeat
    }

    /// Removes `heartbeat` (its loop ended on purpose).
    public func remove(_ heartbeat: Heartbeat) {
        _ = registered.withLock { $0.removeValue(forKey: ObjectIdentifier(heartbeat)) }
    }

    /// Every registered heartbeat's name and age, sorted by name.
    public func snapshot() -> [(name: String, age: Duration)] {
        registered.withLock { Array($0.values) }.map { ($0.name, $0.age) }.sorted { $0.name < $1.name }
    }
}
