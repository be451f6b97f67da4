import APNs

/// Sends one notification to APNs and returns Apple's answer. `APNsClient` is the production
/// implementation; the dispatcher depends only on this.
public protocol NotificationSender: Sendable {
    /// - Throws: when no answer arrived (connection failure, timeout); the dispatcher reports the
    ///   notification `FAILED` (retries come with the connection pool).
    func send(_ request: APNsRequest, environment: APNsEnvironment) async throws -> APNsResponse
}

extension APNsClient: NotificationSender {}
