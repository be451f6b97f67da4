import ServiceCore

/// The retry decision of one notification in `APNsClient.send`, as a value: an event in (Apple's
/// answer, a stream that was reset, timed out or never processed, a lost connection, an open circuit),
/// an action out (docs/apns-client.md "Retry state machine"). No I/O and no clock: the caller passes
/// the time, so every rule is tested without a network.
///
/// Rules (docs/apns-protocol.md §3, docs/semantics.md "Retries follow the reason"):
/// - 200: done. Every 4xx that is not listed below, unknown reasons, and 410: final at once.
/// - Streams APNs provably did not process (above a GOAWAY's last-stream-id, REFUSED_STREAM, queued
///   on a connection that closed before sending them): sent again at once, not an attempt, at most
///   ``Policy/maxUnprocessedResends`` times.
/// - Transient answers: 500, 503 `ServiceUnavailable`, 429 `TooManyRequests`, a lost connection, a
///   reset stream, a timed-out stream, no connection: retried with capped exponential back-off and
///   jitter while the next attempt starts before the retry deadline (``APNsRetryHorizon``); no
///   attempt limit. For 429 and a timed-out stream the client waits in the device token's gate
///   (`APNsDeviceGates`) instead; the delay here only decides whether the deadline allows another try.
/// - 503 `Shutdown`, 400 `IdleTimeout`: on a new connection, at once the first time, then with back-off.
/// - 403 `ExpiredProviderToken`: once, at once, with a freshly minted JWT on a new connection; a
///   second one is a provider fault (final).
/// - 429 `TooManyProviderTokenUpdates`: a provider fault; the JWT is kept, retried after
///   ``Policy/providerTokenUpdateDelay`` within the deadline.
/// - 403 `InvalidProviderToken` and the other credential reasons: provider faults, final.
/// - 400 `TopicDisallowed`: once, at once, on a new connection (when the pool allows it, see
///   ``APNsTopicScopeRefresh``); a second is final.
/// - An open circuit breaker: wait as it says; no attempt is spent.
public struct APNsRetryStateMachine: Sendable {
    /// Timings and limits.
    public struct Policy: Sendable, Hashable {
        /// Back-off after transient failures (`APNsClient.Configuration.RetryPolicy.backoff`).
        public var backoff: APNsClient.Configuration.Backoff
        /// First hold of a device token after 429 `TooManyRequests`; doubles per strike up to
        /// `backoff.maximum`.
        public var tooManyRequestsDelay: Duration
        /// Wait after 429 `TooManyProviderTokenUpdates`.
        public var providerTokenUpdateDelay: Duration
        /// Most resends of streams APNs did not process.
        public var maxUnprocessedResends: Int

        /// Creates a policy.
        public init(backoff: APNsClient.Configuration.Backoff, tooManyRequestsDelay: Duration, providerTokenUpdateDelay: Duration,
                    maxUnprocessedResends: Int) {
            self.backoff = backoff
            self.tooManyRequestsDelay = tooManyRequestsDelay
            self.providerTokenUpdateDelay = providerTokenUpdateDelay
            self.maxUnprocessedResends = maxUnprocessedResends
        }
    }

    /// What happened to the last try.
    public enum Event: Sendable, Hashable {
        /// APNs answered with `status` and (for errors) `reason`.
        case response(status: Int, reason: APNsReason?)
        /// APNs provably did not process the stream (GOAWAY above last-stream-id, REFUSED_STREAM, or
        /// the request never left our queue): not an attempt.
        case notProcessed
        /// No answer within the request timeout; the stream was reset with CANCEL. An attempt.
        case streamTimeout
        /// The peer reset the stream, or the connection was lost with the stream open. An attempt.
        case connectionLost
        /// No connection could be had in time (opening failed, or no stream came free): nothing sent.
        case noConnection
        /// The circuit breaker holds every send for `wait`: nothing sent, no attempt spent.
        case circuitOpen(wait: Duration)
    }

    /// What the connection of the next try must be.
    public enum ConnectionChange: Sendable, Hashable {
        /// Any connection of the pool.
        case none
        /// Retire the connection that answered, then use another.
        case retire
        /// Retire the connection and start a new one with a freshly minted JWT replacing the refused one.
        case retireAndRenewProviderToken
        /// 400 `TopicDisallowed`: a connection opened before a topic-scoped key gained the bundle ID
        /// may refuse it; retry once on a connection opened since (``APNsTopicScopeRefresh``), or
        /// stop with the answer when the pool says it is final.
        case newConnectionForTopic
        /// APNs refused the connection's change of JWT: it goes back to the JWT it sent before while
        /// that is valid, else it is retired (``APNsConnectionProviderToken/refusedChange(to:now:)``).
        case restorePreviousProviderToken
    }

    /// Why the machine stopped without success.
    public enum Stop: Sendable, Hashable {
        /// A final answer from Apple (a rejection, a deactivation, an unknown reason).
        case final
        /// A provider-token fault (`InvalidProviderToken`, a repeated `ExpiredProviderToken`, …): final,
        /// never touching a device token.
        case providerTokenFault
        /// The next attempt would start after the retry deadline.
        case retryHorizonExceeded
        /// Streams not processed were resent ``Policy/maxUnprocessedResends`` times.
        case tooManyUnprocessedResends
    }

    /// The decision.
    public enum Action: Sendable, Hashable {
        /// APNs accepted the notification.
        case delivered
        /// Send again after `delay` (zero: at once), on the connection `change` asks for. `reason` is
        /// nil for an immediate resend and otherwise what an ``APNsRetryWaiter`` is told.
        case retry(after: Duration, reason: APNsRetryReason?, change: ConnectionChange)
        /// Stop.
        case stop(Stop)
    }

    /// The policy in force.
    public let policy: Policy
    /// The last instant (ms since the UNIX epoch) an attempt may start.
    public let deadlineMilliseconds: Int64
    /// Tries APNs may have processed so far.
    public private(set) var attempts = 0
    /// Consecutive transient failures (the back-off exponent).
    public private(set) var failures = 0
    /// Resends of streams APNs did not process.
    public private(set) var unprocessedResends = 0
    /// Whether the one `TopicDisallowed` retry was spent.
    public private(set) var retriedTopicDisallowed = false
    /// Whether the one `ExpiredProviderToken` retry was spent.
    public private(set) var renewedProviderToken = false
    /// 429 `TooManyRequests` answers so far (the device token's hold grows with them).
    public private(set) var tooManyRequestsStrikes = 0
    /// The last failure that was retried or that stopped the machine, for the error the client throws.
    public private(set) var lastEvent: Event?
    private let random: @Sendable () -> Double

    /// Whether the last event was the circuit breaker holding the send.
    public var lastEventWasCircuitOpen: Bool {
        if case .circuitOpen? = lastEvent { return true }
        return false
    }

    /// Creates the machine of one notification.
    /// - Parameters:
    ///   - policy: timings and limits.
    ///   - deadlineMilliseconds: the retry deadline in ms since the UNIX epoch.
    ///   - random: a number in 0.5…1.0 for the jitter (injected by tests).
    public init(policy: Policy, deadlineMilliseconds: Int64, random: @escaping @Sendable () -> Double = { Double.random(in: 0.5...1.0) }) {
        self.policy = policy
        self.deadlineMilliseconds = deadlineMilliseconds
        self.random = random
    }

    /// Decides what follows `event`, observed at `nowMilliseconds` (ms since the UNIX epoch).
    public mutating func handle(_ event: Event, nowMilliseconds now: Int64) -> Action {
        switch event {
        case .response(let status, let reason):
            attempts += 1
            return handleResponse(status: status, reason: reason, now: now)
        case .notProcessed:
            unprocessedResends += 1
            guard unprocessedResends <= policy.maxUnprocessedResends else { return stop(.tooManyUnprocessedResends, event) }
            return .retry(after: .zero, reason: nil, change: .none)
        case .streamTimeout:
            attempts += 1
            return backOff(event, reason: .streamTimeout, now: now)
        case .connectionLost:
            attempts += 1
            return backOff(event, reason: .connectionFailure, now: now)
        case .noConnection:
            return backOff(event, reason: .connectionFailure, now: now)
        case .circuitOpen(let wait):
            return retry(after: wait, reason: .circuitOpen, change: .none, event, now: now)
        }
    }

    private mutating func handleResponse(status: Int, reason: APNsReason?, now: Int64) -> Action {
        let event = Event.response(status: status, reason: reason)
        if status == 200 { return .delivered }
        if case .unknown? = reason { return stop(.final, event) }
        if let reason, reason.isProviderTokenFault, reason != .expiredProviderToken, reason != .tooManyProviderTokenUpdates {
            return stop(.providerTokenFault, event)
        }
        if status == 400, reason == .topicDisallowed, !retriedTopicDisallowed {
            retriedTopicDisallowed = true
            return retry(after: .zero, reason: nil, change: .newConnectionForTopic, event, now: now)
        }
        switch APNsReason.action(forStatus: status, reason: reason) {
        case .deactivateToken, .reject:
            return stop(.final, event)
        case .retryWithBackoff:
            return backOff(event, reason: .serverError(status: status), now: now)
        case .retryOnNewConnection:
            failures += 1
            let delay = failures == 1 ? Duration.zero : policy.backoff.delay(afterFailures: failures - 1, random: random())
            return retry(after: delay, reason: delay == .zero ? nil : .serverError(status: status), change: .retire, event, now: now)
        case .refreshProviderTokenAndRetryOnce:
            guard !renewedProviderToken else { return stop(.providerTokenFault, event) }
            renewedProviderToken = true
            return retry(after: .zero, reason: nil, change: .retireAndRenewProviderToken, event, now: now)
        case .retryAfterDelayKeepingJWT:
            return retry(after: policy.providerTokenUpdateDelay, reason: .providerToken, change: .restorePreviousProviderToken, event, now: now)
        case .backOffDeviceToken:
            tooManyRequestsStrikes += 1
            let exponent = min(tooManyRequestsStrikes - 1, 20)
            let cap = max(policy.backoff.maximum, policy.tooManyRequestsDelay)
            var base = policy.tooManyRequestsDelay * (1 << exponent)
            if base > cap || base < .zero { base = cap }
            return retry(after: base * (0.5 + random() / 2), reason: .tooManyRequests, change: .none, event, now: now)
        }
    }

    private mutating func backOff(_ event: Event, reason: APNsRetryReason, now: Int64) -> Action {
        failures += 1
        return retry(after: policy.backoff.delay(afterFailures: failures, random: random()), reason: reason, change: .none, event, now: now)
    }

    private mutating func retry(after delay: Duration, reason: APNsRetryReason?, change: ConnectionChange, _ event: Event, now: Int64) -> Action {
        lastEvent = event
        guard now + delay.wholeMillisecondsRoundedUp <= deadlineMilliseconds else { return .stop(.retryHorizonExceeded) }
        return .retry(after: delay, reason: reason, change: change)
    }

    private mutating func stop(_ why: Stop, _ event: Event) -> Action {
        lastEvent = event
        return .stop(why)
    }
}

extension Duration {
    /// Whole milliseconds, rounded up (a delay of 0.4 ms still counts as 1 ms against a deadline).
    fileprivate var wholeMillisecondsRoundedUp: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    }
}

extension APNsReason {
    /// Apple's reasons that blame the provider's credentials (token or certificate), never the device
    /// (docs/apns-protocol.md §3, §4): 403 `InvalidProviderToken`, `ExpiredProviderToken`,
    /// `MissingProviderToken`, `BadCertificate`, `BadCertificateEnvironment`, `UnrelatedKeyIdInToken`,
    /// `BadEnvironmentKeyIdInToken` (either spelling) and 429 `TooManyProviderTokenUpdates`.
    public var isProviderTokenFault: Bool {
        switch self {
        case .invalidProviderToken, .expiredProviderToken, .missingProviderToken, .tooManyProviderTokenUpdates,
             .badCertificate, .badCertificateEnvironment, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken:
            true
        default:
            false
        }
    }
}
