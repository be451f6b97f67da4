/// A token bucket (the rate limit of one API key): holds at most `capacity` tokens, refills at
/// `ratePerSecond`, and each call takes one. Pure state: the caller passes the time.
public struct TokenBucket: Sendable, Equatable {
    /// Tokens the bucket holds when full (calls allowed in a burst).
    public let capacity: Double
    /// Tokens added per second.
    public let ratePerSecond: Double
    private var tokens: Double
    private var updatedAt: Double

    /// A full bucket at `now`.
    /// - Parameters:
    ///   - ratePerSecond: sustained rate, > 0.
    ///   - capacity: burst size, ≥ 1.
    ///   - now: monotonic time in seconds.
    public init(ratePerSecond: Double, capacity: Double, now: Double) {
        precondition(ratePerSecond > 0 && capacity >= 1, "a token bucket needs a positive rate and a capacity of at least 1")
        self.ratePerSecond = ratePerSecond
        self.capacity = capacity
        self.tokens = capacity
        self.updatedAt = now
    }

    /// Takes one token at `now` (monotonic seconds).
    /// - Returns: nil when the call may proceed, else the seconds until a token is available.
    public mutating func take(now: Double) -> Double? {
        if now > updatedAt {
            tokens = min(capacity, tokens + (now - updatedAt) * ratePerSecond)
            updatedAt = now
        }
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        return (1 - tokens) / ratePerSecond
    }
}
