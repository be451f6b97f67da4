import Foundation
import ServiceCore

/// How long transient failures (500, 503, a dropped connection, a timed-out stream, 429) of one
/// notification are retried (docs/semantics.md "Retries wait on timers, within a horizon"):
///
/// | `apns-expiration` | retried until |
/// |---|---|
/// | a time in the future | that time |
/// | a time in the past | not retried (the deadline is that time) |
/// | `0` ("try once, don't store") | now + ``immediate`` (`PUSH_APNS_RETRY_HORIZON_IMMEDIATE_MS`, default 30 s) |
/// | absent | now + ``absent`` (`PUSH_APNS_RETRY_HORIZON_MS`, default 15 min) |
///
/// Past the deadline the notification fails (`RETRY_HORIZON_EXCEEDED`). A pure value: no clock is read.
public struct APNsRetryHorizon: Sendable, Hashable {
    /// Horizon for `apns-expiration: 0`. Default 30 s: a one-time code sent ten minutes late is worse
    /// than a failure.
    public var immediate: Duration
    /// Horizon when `apns-expiration` is absent. Default 15 minutes.
    public var absent: Duration

    /// Creates a horizon.
    /// - Parameters:
    ///   - immediate: for `apns-expiration: 0`; default 30 s.
    ///   - absent: without `apns-expiration`; default 15 min.
    public init(immediate: Duration = .seconds(30), absent: Duration = .seconds(15 * 60)) {
        self.immediate = immediate
        self.absent = absent
    }

    /// The last instant an attempt of a notification with `expiration`, first seen at `now`, may start.
    /// - Parameters:
    ///   - expiration: the notification's `apns-expiration`.
    ///   - now: when the notification was first handed to the client.
    /// - Returns: the deadline (the expiration itself when it is a time, even a past one).
    public func deadline(for expiration: APNsExpiration, now: Date) -> Date {
        switch expiration {
        case .at(let seconds): Date(timeIntervalSince1970: TimeInterval(seconds))
        case .immediately: now.addingTimeInterval(immediate.inSeconds)
        case .omitted: now.addingTimeInterval(absent.inSeconds)
        }
    }

    /// The deadline of `request` first seen at `now` (see ``deadline(for:now:)``).
    public func deadline(for request: APNsRequest, now: Date) -> Date {
        deadline(for: request.expiration, now: now)
    }
}
