import Foundation
import Synchronization

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

/// Per-app send-rate limits for campaigns: one `TokenBucket` per bundle id, its rate from
/// `limits[bundleID]` or else `defaultRate` (nil or 0: unlimited); burst = one second of rate.
public final class AppRateLimiter: Sendable {
    private let defaultRate: Double?
    private let limits: [String: Double]
    private let buckets = Mutex<[String: TokenBucket]>([:])
    private let start = ContinuousClock.now

    /// - Parameters:
    ///   - defaultRate: sends per second for apps without their own limit; nil or ≤ 0: unlimited.
    ///   - limits: sends per second by bundle id (a value ≤ 0: unlimited for that app).
    public init(defaultRate: Double?, limits: [String: Double] = [:]) {
        self.defaultRate = defaultRate
        self.limits = limits
    }

    /// The rate that applies to `bundleID`, nil when unlimited.
    public func rate(for bundleID: String) -> Double? {
        guard let rate = limits[bundleID] ?? defaultRate, rate > 0 else { return nil }
        return rate
    }

    /// Waits until `bundleID` may send one more notification.
    /// - Throws: `CancellationError` when the task is cancelled while waiting.
    public func acquire(_ bundleID: String) async throws {
        guard let rate = rate(for: bundleID) else { return }
        let elapsed = ContinuousClock.now - start
        let now = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let wait = buckets.withLock { buckets in
            var bucket = buckets[bundleID] ?? TokenBucket(ratePerSecond: rate, burst: max(1, rate), now: now)
            defer { buckets[bundleID] = bucket }
            return bucket.take(at: now)
        }
        if wait > 0 { try await Task.sleep(for: .nanoseconds(Int64(wait * 1e9))) }
    }

    /// Parses `PUSH_CAMPAIGN_RATE_LIMITS`: `bundle.id=rate` pairs separated by commas.
    /// - Throws: `CampaignConfigurationError` naming the bad pair.
    public static func parseLimits(_ text: String) throws(CampaignConfigurationError) -> [String: Double] {
        var result: [String: Double] = [:]
        for pair in text.split(separator: ",") {
            let trimmed = pair.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            let parts = trimmed.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, !parts[0].isEmpty, let rate = Double(parts[1]), rate >= 0, rate.isFinite else {
                throw CampaignConfigurationError("PUSH_CAMPAIGN_RATE_LIMITS: \"\(trimmed)\" is not bundle.id=sends_per_second")
            }
            result[String(parts[0])] = rate
        }
        return result
    }
}

/// A campaign setting that cannot be used, naming the variable.
public struct CampaignConfigurationError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
