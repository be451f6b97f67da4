import Foundation
import ServiceCore
import Synchronization

/// Per-app send-rate limits for campaigns: one `TokenBucket` per bundle id, its rate from
/// `limits[bundleID]` or else `defaultRate` (nil or 0: unlimited); burst = a tenth of a second of rate
/// (`burst(for:)`), so that no second carries more than 1.1 × the setting.
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

    /// The bucket's capacity for `rate` sends per second: a tenth of a second of sends, at least one.
    /// Any one second then holds at most the burst plus a second of refill, 1.1 × the rate: Apple
    /// never sees a burst much above the app's setting. (With a second of rate, a campaign's first
    /// second sent twice the setting, and the transactional pushes beside it waited behind that burst.)
    static func burst(for rate: Double) -> Double { max(1, rate / 10) }

    /// Waits until `bundleID` may send one more notification.
    /// - Throws: `CancellationError` when the task is cancelled while waiting.
    public func acquire(_ bundleID: String) async throws {
        guard let rate = rate(for: bundleID) else { return }
        let elapsed = ContinuousClock.now - start
        let now = elapsed.inSeconds
        let wait = buckets.withLock { buckets in
            var bucket = buckets[bundleID] ?? TokenBucket(ratePerSecond: rate, burst: Self.burst(for: rate), now: now)
            defer { buckets[bundleID] = bucket }
            return bucket.reserve(at: now)
        }
        if wait > 0 { try await Task.sleep(for: Self.sleepDuration(seconds: wait)) }
    }

    /// Rates accepted, in sends per second besides 0 (unlimited): from one send in 1,000 s to a
    /// billion a second. A rate outside would make a wait that no clock can express (1e-300 a second
    /// is a wait of 1e300 s).
    public static let acceptedRates: ClosedRange<Double> = 0.001...1e9

    /// Whether `rate` may be configured: 0 (unlimited) or within `acceptedRates`.
    public static func isAcceptedRate(_ rate: Double) -> Bool {
        rate == 0 || acceptedRates.contains(rate)
    }

    /// `seconds` as a duration, saturating at a day (never traps, whatever the double: NaN and
    /// negative waits are no wait).
    static func sleepDuration(seconds: Double) -> Duration {
        guard seconds > 0 else { return .zero }
        return .nanoseconds(Int64(min(seconds, 86_400) * 1e9))
    }

    /// Parses `PUSH_CAMPAIGN_RATE_LIMITS`: `bundle.id=rate` pairs separated by commas.
    /// - Throws: `CampaignConfigurationError` naming the bad pair.
    public static func parseLimits(_ text: String) throws(CampaignConfigurationError) -> [String: Double] {
        var result: [String: Double] = [:]
        for pair in text.split(separator: ",") {
            let trimmed = pair.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            let parts = trimmed.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, !parts[0].isEmpty, let rate = Double(parts[1]), isAcceptedRate(rate) else {
                throw CampaignConfigurationError(
                    "PUSH_CAMPAIGN_RATE_LIMITS: \"\(trimmed)\" is not bundle.id=sends_per_second (0, or 0.001 to 1e9)")
            }
            result[String(parts[0])] = rate
        }
        return result
    }
}
