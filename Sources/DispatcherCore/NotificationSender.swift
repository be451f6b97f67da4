import APNs

/// Sends one notification to APNs and returns Apple's answer. `APNsClient` is the production
/// implementation; the dispatcher depends only on this.
public protocol NotificationSender: Sendable {
    /// Returns Apple's final answer after the sender's own retries (`APNsResponse.attempts` says how
    /// many sends it took; a retryable action on the result means the sender gave up).
    /// - Throws: when no answer arrived within the retry rules (`APNsError` `.deliveryFailed` with
    ///   `attempts`); the dispatcher reports the notification `FAILED`.
    func send(_ request: APNsRequest, environment: APNsEnvironment) async throws -> APNsResponse
}

extension APNsClient: NotificationSender {}
