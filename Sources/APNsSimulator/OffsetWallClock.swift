import ServiceCore
import Synchronization

/// The system clock moved by an offset, so the simulator can play an APNs whose clock differs from
/// the provider's (a provider clock an hour behind makes every JWT look expired; docs/apns-protocol.md
/// §4). Set at start (`PUSH_SIM_CLOCK_OFFSET_MS`) and moved at runtime through `POST /admin/clock`
/// (`advance_ms`, `offset_ms`).
public final class OffsetWallClock: WallClock {
    private let base: any WallClock
    private let offset: Atomic<Int64>

    /// A clock `offsetMilliseconds` ahead of `base` (behind when negative).
    public init(offsetMilliseconds: Int64, base: any WallClock = SystemWallClock()) {
        self.base = base
        self.offset = Atomic(offsetMilliseconds)
    }

    /// The current offset in milliseconds.
    public var offsetMilliseconds: Int64 { offset.load(ordering: .relaxed) }

    /// Replaces the offset.
    public func setOffset(milliseconds: Int64) { offset.store(milliseconds, ordering: .relaxed) }

    /// Moves the clock by `milliseconds` (negative: back).
    public func advance(milliseconds: Int64) { offset.add(milliseconds, ordering: .relaxed) }

    /// The base clock's time plus the offset.
    public func nowMilliseconds() -> Int64 { base.nowMilliseconds() + offset.load(ordering: .relaxed) }
}
