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

    /// Called when the notification must wait for its device token's gate (``APNsDeviceGates``: a 429
    /// `TooManyRequests` or a timed-out stream made the token's notifications go one at a time behind
    /// one backoff). Runs `turn`, which returns when the gate lets this notification go; a waiter
    /// gives back what it holds (a budget permit) while `turn` runs and takes it again after. The
    /// default runs `turn` as is.
    /// - Parameters:
    ///   - attemptsSoFar: sends of this notification that APNs may have processed so far.
    ///   - turn: waits for the gate; its result is returned unchanged.
    /// - Throws: whatever `turn` throws (`CancellationError`), or anything to stop retrying.
    func waitForDeviceGate<T: Sendable>(attemptsSoFar: Int, _ turn: @Sendable () async throws -> T) async throws -> T
}

extension APNsRetryWaiter {
    /// Runs `turn` holding whatever the caller holds.
    public func waitForDeviceGate<T: Sendable>(attemptsSoFar: Int, _ turn: @Sendable () async throws -> T) async throws -> T {
        try await turn()
    }
}
