/// What to do after APNs refused a notification (docs/semantics.md "Retries follow the reason").
public enum APNsReasonAction: Hashable, Sendable, CaseIterable {
    /// 410 `Unregistered`/`ExpiredToken` (unless re-registered after the 410 timestamp) and 400
    /// `BadDeviceToken` for the token's own environment: deactivate the token, don't retry. (For apps
    /// that opted in, the dispatcher first tries the other environment once after `BadDeviceToken`:
    /// docs/semantics.md "The other environment after BadDeviceToken".)
    case deactivateToken
    /// 500, 503 `ServiceUnavailable` (and dropped connections, timed-out streams): retry with exponential
    /// backoff and jitter, never past the notification's expiration.
    case retryWithBackoff
    /// 503 `Shutdown`, 400 `IdleTimeout`: retry on a new connection.
    case retryOnNewConnection
    /// 403 `ExpiredProviderToken`: mint a new JWT, open a new connection, retry once.
    case refreshProviderTokenAndRetryOnce
    /// 429 `TooManyProviderTokenUpdates`: keep the cached JWT, retry after a delay, raise an alert.
    case retryAfterDelayKeepingJWT
    /// 429 `TooManyRequests`: back off this device token only, then retry.
    case backOffDeviceToken
    /// Every other 4xx and unknown reasons: fail at once with Apple's reason.
    case reject

    /// True for every action that sends the notification again.
    public var retries: Bool { self != .deactivateToken && self != .reject }
}
