/// Waits between two attempts of one notification on `APNsClient`'s behalf.
///
/// The dispatcher implements it to take a waiting notification off its hot path (a timer, or durable
/// storage past a cap); without one the client sleeps itself. The client calls it only when the
/// retry deadline (``APNsSendOptions/retryDeadline``) still allows another attempt after `delay`.
public protocol APNsRetryWaiter: Sendable {
    /// Called before the client waits `delay` between attempts. Returns when the client may send
    /// again; throws to stop retrying (the client rethrows that error unchanged).
    /// - Parameters:
    ///   - delay: the back-off the client chose (capped exponential with jitter, or the hold of a
    ///     device token after 429, or the circuit breaker's wait); returning earlier is allowed.
    ///   - attemptsSoFar: sends of this notification that APNs may have processed so far.
    ///   - reason: why the client waits.
    /// - Throws: anything; the client stops and rethrows it unchanged.
    func wait(_ delay: Duration, attemptsSoFar: Int, reason: APNsRetryReason) async throws
}
