/// Lets one log line per key through per interval and counts the lines it held back, so that a flood
/// (a peer hitting a limit thousands of times a second) costs a line every few seconds, not a line each.
///
/// A value type without a clock of its own: callers pass the time, and share it under a lock.
public struct LogRateLimiter: Sendable {
    /// Shortest time between two lines of the same key.
    public let interval: Duration
    private var keys: [String: (last: ContinuousClock.Instant, suppressed: Int)] = [:]

    /// Creates a limiter letting one line per key through per `interval`.
    public init(interval: Duration) {
        self.interval = interval
    }

    /// Whether a line for `key` may be written at `now`: returns how many lines of that key were held
    /// back since the last one written (0 for the first), or nil when this one must be held back too.
    public mutating func admit(_ key: String, now: ContinuousClock.Instant) -> Int? {
        if let entry = keys[key], now - entry.last < interval {
            keys[key] = (entry.last, entry.suppressed + 1)
            return nil
        }
        let suppressed = keys[key]?.suppressed ?? 0
        keys[key] = (now, 0)
        return suppressed
    }
}
