import Foundation

/// Per-call options of `APNsClient.send(_:environment:options:)`.
public struct APNsSendOptions: Sendable {
    /// Who waits between attempts; nil: the client sleeps itself (`Task.sleep`).
    public var waiter: (any APNsRetryWaiter)?
    /// The last instant an attempt may start; nil: computed from `apns-expiration` and the configured
    /// horizons, counted from the call (``APNsRetryHorizon/deadline(for:now:)``). A caller that parks
    /// a notification durably stores the deadline computed at first sight and passes it back here, so
    /// a restart does not extend the horizon.
    public var retryDeadline: Date?
    /// The credentials this send authenticates with, chosen by the caller (the dispatcher's
    /// credentials registry); nil: the client's own map by bundle ID, then its default credentials.
    /// Pools are per (credentials, environment), so a connection never carries two teams.
    public var credentials: APNsCredentials?
    /// The credentials to send on when `credentials` are refused with a provider-token reason
    /// (a key being rotated in: the key before it); nil: no fallback.
    public var fallbackCredentials: APNsCredentials?

    /// Creates options.
    /// - Parameters:
    ///   - waiter: who waits between attempts; nil lets the client sleep.
    ///   - retryDeadline: when retrying must stop; nil computes it from the request.
    ///   - credentials: the credentials to authenticate with; nil uses the client's map.
    ///   - fallbackCredentials: the key before `credentials`, used when they are refused; nil: none.
    public init(waiter: (any APNsRetryWaiter)? = nil, retryDeadline: Date? = nil,
                credentials: APNsCredentials? = nil, fallbackCredentials: APNsCredentials? = nil) {
        self.waiter = waiter
        self.retryDeadline = retryDeadline
        self.credentials = credentials
        self.fallbackCredentials = fallbackCredentials
    }
}
