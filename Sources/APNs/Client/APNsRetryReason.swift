/// Why `APNsClient` waits before sending a notification again (docs/apns-client.md "Retry state
/// machine"). Handed to an ``APNsRetryWaiter`` so a caller can park the notification off its hot path.
public enum APNsRetryReason: Sendable, Hashable {
    /// 429 `TooManyRequests`: this device token is held back (docs/apns-protocol.md §3).
    case tooManyRequests
    /// 500 `InternalServerError` or 503 `ServiceUnavailable`; `status` is the HTTP `:status`.
    case serverError(status: Int)
    /// APNs did not answer the stream within the request timeout; the stream was reset with
    /// RST_STREAM(CANCEL) (RFC 9113 §8.1).
    case streamTimeout
    /// The connection dropped, was reset or could not be opened while the notification was in flight
    /// or waiting for it.
    case connectionFailure
    /// The pool's circuit breaker is open: APNs failed for every connection; nothing is sent until it
    /// lets one notification through. Waiting here spends no attempt.
    case circuitOpen
    /// 429 `TooManyProviderTokenUpdates` (a provider fault: the JWT is kept and the send retried later).
    case providerToken
}

extension APNsRetryReason {
    /// The `reason` label of `push_apns_retries_total`: `too_many_requests`, `server_error`,
    /// `stream_timeout`, `connection_failure`, `circuit_open`, `provider_token`.
    public var metricLabel: String {
        switch self {
        case .tooManyRequests: "too_many_requests"
        case .serverError: "server_error"
        case .streamTimeout: "stream_timeout"
        case .connectionFailure: "connection_failure"
        case .circuitOpen: "circuit_open"
        case .providerToken: "provider_token"
        }
    }
}
