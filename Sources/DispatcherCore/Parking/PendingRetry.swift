import APNs
import Foundation
import PushDomain
import PushMessages

/// One notification parked in `pending_retries`: everything needed to send it again and report its
/// outcome without its send request (docs/dispatcher-engine.md "Retries off the hot path, and parking").
public struct PendingRetry: Sendable, Hashable {
    /// The APNs request as first sent: same payload, headers and `apns-id`.
    public var request: APNsRequest
    /// The token's environment (which APNs host).
    public var environment: APNsEnvironment
    /// The report with the fields known before sending (request id, token, bundle id, push type,
    /// user, environment, `apns-id`, requested and first-sent times); the outcome is filled in when
    /// the notification settles.
    public var report: DeliveryReport
    /// The send request's W3C `traceparent`, copied to its feedback events.
    public var traceParent: String
    /// The last instant an attempt may start, fixed when the notification was first sent, so a
    /// restart never extends the horizon.
    public var retryDeadline: Date
    /// Sends APNs may have processed so far, over every delivery of this notification.
    public var attempts: Int
    /// Why it waits (`APNsRetryReason`, for operators).
    public var lastReason: String

    /// - Parameters: see the properties.
    public init(request: APNsRequest, environment: APNsEnvironment, report: DeliveryReport, traceParent: String,
                retryDeadline: Date, attempts: Int, lastReason: String) {
        self.request = request
        self.environment = environment
        self.report = report
        self.traceParent = traceParent
        self.retryDeadline = retryDeadline
        self.attempts = attempts
        self.lastReason = lastReason
    }

    /// The send request's id.
    public var requestID: String { report.requestID }
    /// The device token (lowercase hex).
    public var deviceToken: String { report.deviceToken }
}
