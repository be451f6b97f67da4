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

    /// Creates options.
    /// - Parameters:
    ///   - waiter: who waits between attempts; nil lets the client sleep.
    ///   - retryDeadline: when retrying must stop; nil computes it from the request.
    public init(waiter: (any APNsRetryWaiter)? = nil, retryDeadline: Date? = nil) {
        self.waiter = waiter
        self.retryDeadline = retryDeadline
    }
}
