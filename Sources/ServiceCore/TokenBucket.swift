/// A token bucket: holds at most `burst` tokens, refills continuously at `ratePerSecond`, and each
/// call or send takes one. Pure arithmetic on a time the caller passes (seconds, any monotonic base),
/// so it is tested without a clock; callers that share one keep it under a lock.
///
/// Two ways to take a token:
/// - `take(now:)` (and `take(upTo:now:)` for several) refuses when none is left and says how long until one is (an API key's rate limit:
///   the caller answers "retry after" and nothing is owed);
/// - `reserve(at:)` always takes one, going into debt, and says how long to wait before using it
///   (a sender's pacing: concurrent senders queue behind each other, so the long-run rate never
///   exceeds the setting while a burst of at most `burst` goes out at once).
public struct TokenBucket: Sendable, Equatable {
    /// Tokens added per second; > 0.
    public let ratePerSecond: Double
    /// Tokens the bucket holds when full (how many go at once); ≥ 1.
    public let burst: Double
    /// Tokens available at `updatedAt` (negative: reserved ahead).
    public private(set) var tokens: Double
    /// Seconds, in the caller's time base.
    public private(set) var updatedAt: Double

    /// A full bucket at `now`.
    /// - Parameters:
    ///   - ratePerSecond: sustained rate, > 0.
    ///   - burst: capacity, ≥ 1.
    ///   - now: the caller's time in seconds.
    public init(ratePerSecond: Double, burst: Double, now: Double) {
        precondition(ratePerSecond > 0 && burst >= 1, "a token bucket needs a positive rate and a burst of at least 1")
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        self.tokens = burst
        self.updatedAt = now
    }

    /// Takes a token if one is available at `now`.
    /// - Returns: nil when taken, else the seconds until a token is available (nothing is taken).
    public mutating func take(now: Double) -> Double? {
        refill(now)
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        return (1 - tokens) / ratePerSecond
    }

    /// Whole tokens available at `now` (after refilling).
    public mutating func available(at now: Double) -> Int {
        refill(now)
        return tokens >= 1 ? Int(min(tokens.rounded(.down), Double(Int32.max))) : 0
    }

    /// Takes as many of `count` tokens as are available at `now` (an item-counted rate limit: a
    /// batch of 500 on a bucket holding 3 takes 3).
    /// - Parameter count: tokens wanted, ≥ 0.
    /// - Returns: how many were taken (0…`count`), and when fewer than `count`, the seconds until the
    ///   next token is available.
    public mutating func take(upTo count: Int, now: Double) -> (taken: Int, wait: Double?) {
        let taken = min(max(count, 0), available(at: now))
        tokens -= Double(taken)
        return (taken, taken < count ? (1 - tokens) / ratePerSecond : nil)
    }

    /// Seconds from `now` until a token is available (0 when one is).
    public mutating func wait(at now: Double) -> Double {
        refill(now)
        return tokens >= 1 ? 0 : (1 - tokens) / ratePerSecond
    }

    /// Takes a token at `now`, going into debt when none is left.
    /// - Returns: the seconds to wait before using it (0 when one was available).
    public mutating func reserve(at now: Double) -> Double {
        refill(now)
        tokens -= 1
        return tokens >= 0 ? 0 : -tokens / ratePerSecond
    }

    private mutating func refill(_ now: Double) {
        guard now > updatedAt else { return }
        tokens = min(burst, tokens + (now - updatedAt) * ratePerSecond)
        updatedAt = now
    }
}
