import APNs
import Foundation
import PushDomain

/// Sends one notification to APNs and returns Apple's answer. `APNsClient` is the production
/// implementation; the dispatcher depends only on this.
public protocol NotificationSender: Sendable {
    /// Returns Apple's final answer after the sender's own retries (`APNsResponse.attempts` says how
    /// many sends it took; a retryable action on the result means the sender gave up).
    /// - Parameter options: who waits between attempts (the dispatcher's waiter takes a waiting
    ///   notification off its hot path) and the retry deadline.
    /// - Throws: when no answer arrived within the retry rules (`APNsError` `.deliveryFailed` with
    ///   `attempts`), and whatever the waiter throws, unchanged; the dispatcher reports the first
    ///   `FAILED` and handles the second (`WaiterEndedSend`, turned into `SendAnswer.interrupted`).
    func send(_ request: APNsRequest, environment: APNsEnvironment, options: APNsSendOptions) async throws -> APNsResponse

    /// The last instant an attempt of `request`, first sent now, may start (from `apns-expiration`
    /// and the configured horizons); stored with a parked notification so a restart never extends it.
    func retryDeadline(for request: APNsRequest, now: Date?) -> Date

    /// Broadcasts to a Live Activity channel, at most once (`APNsClient.broadcast`): Apple's refusal
    /// is an answer; a lost answer throws `APNsError` `.unconfirmed`.
    /// - Throws: `APNsError` when no answer came (`attempts` 0: it never reached Apple).
    func broadcast(_ request: APNsBroadcastRequest, environment: APNsEnvironment, options: APNsSendOptions) async throws -> APNsChannelAnswer
}

extension NotificationSender {
    /// `retryDeadline(for:now:)` counted from now.
    func retryDeadline(for request: APNsRequest) -> Date { retryDeadline(for: request, now: nil) }

    /// A sender without broadcasts: nothing is sent.
    /// - Throws: `APNsError` `.invalidConfiguration`, `attempts` 0.
    public func broadcast(_ request: APNsBroadcastRequest, environment: APNsEnvironment, options: APNsSendOptions) async throws -> APNsChannelAnswer {
        throw APNsError(code: .invalidConfiguration, message: "this sender does not broadcast")
    }
}

extension APNsClient: NotificationSender {}
