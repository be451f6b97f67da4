/// How long one attempt of `APNsClient.send` may take, as a value (docs/apns-client.md "Liveness",
/// "Bound"): waiting for a connection or a free stream plus the stream's own answer never take longer
/// than `requestTimeout + connectTimeout`, whatever happens to the connection it was queued on.
public struct APNsAttemptBudget: Sendable, Hashable {
    /// How long a stream may wait for its answer (`APNsClient.Configuration.requestTimeout`).
    public var requestTimeout: Duration
    /// How long setting up a connection may take (`APNsClient.Configuration.connectTimeout`).
    public var connectTimeout: Duration

    /// Creates a budget from the client's two timeouts.
    public init(requestTimeout: Duration, connectTimeout: Duration) {
        self.requestTimeout = requestTimeout
        self.connectTimeout = connectTimeout
    }

    /// The whole attempt: the longest a caller waits for a connection or a stream (after which it
    /// counts as "no connection" and backs off), and the bound of waiting plus the stream.
    public var total: Duration { requestTimeout + connectTimeout }

    /// The timeout of the stream sent after `waited` went to getting a connection and a stream:
    /// what is left of ``total``, at most `requestTimeout`, and never below 1 ms.
    public func streamTimeout(afterWaiting waited: Duration) -> Duration {
        max(min(requestTimeout, total - waited), .milliseconds(1))
    }
}
