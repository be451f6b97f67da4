/// Decides whether a repeated condition is logged again: at most once per `interval` seconds per key.
/// A pure value; the caller passes the time.
struct RateLimitedLog: Sendable {
    /// Seconds between two lines for the same key.
    let interval: Int64
    private var last: [String: Int64] = [:]

    init(interval: Int64) {
        self.interval = interval
    }

    /// True when `key` was not logged within `interval` before `now` (and records it as logged now).
    mutating func shouldLog(_ key: String, nowSeconds now: Int64) -> Bool {
        if let previous = last[key], now - previous < interval, now >= previous { return false }
        last[key] = now
        return true
    }
}
