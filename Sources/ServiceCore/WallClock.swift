import Foundation
import Synchronization

/// Wall-clock time in milliseconds since the UNIX epoch, injectable so that time-dependent rules
/// (JWT age, token event ordering, 410 timestamps) can be tested without waiting.
public protocol WallClock: Sendable {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    func nowMilliseconds() -> Int64
}

extension WallClock {
    /// Whole seconds since 1970-01-01T00:00:00Z (rounded down).
    public func nowSeconds() -> Int64 { nowMilliseconds() / 1000 }
}

/// The system's real-time clock.
public struct SystemWallClock: WallClock {
    public init() {}
    public func nowMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}

/// A clock that only moves when told to; for tests.
public final class ManualWallClock: WallClock {
    private let current: Atomic<Int64>

    /// Starts at `milliseconds` since the epoch.
    public init(milliseconds: Int64) { current = Atomic(milliseconds) }

    public func nowMilliseconds() -> Int64 { current.load(ordering: .relaxed) }

    /// Moves the clock forward by `duration` (rounded down to whole ms).
    public func advance(by duration: Duration) {
        current.add(duration.wholeMilliseconds, ordering: .relaxed)
    }

    /// Sets the clock to `milliseconds` since the epoch.
    public func set(milliseconds: Int64) { current.store(milliseconds, ordering: .relaxed) }
}
