/// A token bucket (rate `ratePerSecond`, capacity `burst`): each send takes one token; tokens refill
/// continuously at the rate up to the capacity. Pure arithmetic on a caller-given time in seconds,
/// so it is tested without a clock.
///
/// `take(at:)` reserves a token even when none is left and answers how long to wait for it: callers
/// sleep that long, so concurrent senders queue behind each other and the long-run rate never
/// exceeds the setting, while a burst of at most `burst` sends can go out at once.
public struct TokenBucket: Sendable, Equatable {
    /// Sends per second; must be > 0.
    public let ratePerSecond: Double
    /// Largest number of sends at once.
    public let burst: Double
    /// Tokens available at `updatedAt` (negative: reserved ahead).
    public private(set) var tokens: Double
    /// Seconds, in the caller's time base.
    public private(set) var updatedAt: Double

    /// - Parameters:
    ///   - ratePerSecond: sends per second, > 0.
    ///   - burst: capacity, ≥ 1; the bucket starts full.
    ///   - now: the caller's time in seconds.
    public init(ratePerSecond: Double, burst: Double, now: Double) {
        precondition(ratePerSecond > 0 && burst >= 1, "TokenBucket needs a positive rate and a burst of at least 1")
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        self.tokens = burst
        self.updatedAt = now
    }

    /// Takes one token.
    /// - Returns: seconds to wait before sending (0 when a token was available).
    public mutating func take(at now: Double) -> Double {
        if now > updatedAt {
            tokens = min(burst, tokens + (now - updatedAt) * ratePerSecond)
            updatedAt = now
        }
        tokens -= 1
        return tokens >= 0 ? 0 : -tokens / ratePerSecond
    }
}
