import Foundation
import HTTP2
import PushDomain
import ServiceCore

extension APNsClient {
    /// Sends one notification like ``send(_:environment:)``, with per-call options: who waits between
    /// attempts (``APNsSendOptions/waiter``), until when retrying may go on
    /// (``APNsSendOptions/retryDeadline``) and which credentials authenticate it
    /// (``APNsSendOptions/credentials``). The decisions are values (``APNsRetryStateMachine``,
    /// ``APNsCircuitAdmission``, ``APNsCredentialChoice``, ``APNsConnectionProviderToken``,
    /// ``APNsAttemptBudget``, ``APNsStreamFailure``); this method performs them (docs/apns-client.md).
    /// - Throws: as ``send(_:environment:)``, and whatever the waiter throws, unchanged.
    public func send(_ request: APNsRequest, environment: APNsEnvironment, options: APNsSendOptions = .init()) async throws -> APNsResponse {
        metrics.countRequest()
        let bundleID = Self.bundleID(of: request)
        let credentials = try credentialChoice.credentials(chosen: options.credentials, bundleID: bundleID, topic: request.topic)
        var send = SendState(request: request, bundleID: bundleID, options: options, machine: retryMachine(for: request, options: options))
        var pool = startingPool(credentials, environment: environment, &send)
        pool.enter()  // a drained pool (its key removed) closes once no send holds it
        defer { pool.leave() }
        defer { if send.holdsGateTurn { gates.finish(send.token, holdsTurn: true, outcome: .other) } }
        while true {
            // The device token's gate: closed after its 429 TooManyRequests or timed-out stream, its
            // notifications go one at a time behind one backoff.
            if !send.holdsGateTurn, let stop = try await passDeviceGate(&send) { return try gaveUp(stop, send, pool: pool) }
            // The circuit breaker: while open nothing is sent, and waiting spends no attempt.
            let circuit = pool.circuitState
            let mayProbe = APNsCircuitAdmission.mayProbe(
                hadTokenFailure: send.hadTokenFailure, circuit: circuit, deviceHasFailureHistory: gates.hasFailureHistory(send.token))
            let isTrial: Bool
            switch APNsCircuitAdmission.step(pool.admit(mayProbe: mayProbe)) {
            case .send(let trial):
                isTrial = trial
            case .wait(let wait):
                handOnGateTurn(&send)
                switch send.machine.handle(.circuitOpen(wait: wait), nowMilliseconds: configuration.clock.nowMilliseconds()) {
                case .retry(let delay, _, _):
                    try await pause(delay, .circuitOpen, send)
                    continue
                case .stop(let why):
                    return try gaveUp(why, send, pool: pool)
                case .delivered:
                    continue
                }
            }
            guard let attempt = try await attempt(&send, pool: pool, isTrial: isTrial) else { continue }
            let isTokenFailure = observe(attempt, &send, pool: pool)
            let action = send.machine.handle(attempt.event, nowMilliseconds: configuration.clock.nowMilliseconds())
            guard let response = try await perform(action, attempt, isTokenFailure: isTokenFailure, send, pool: pool) else { continue }
            if let fallback = fallBack(after: response, attempt, &send, pool: pool) {
                pool.leave()
                pool = fallback
                pool.enter()
                continue
            }
            return response
        }
    }

    /// One send's progress between attempts.
    struct SendState {
        let request: APNsRequest
        let bundleID: String
        /// The device token's hex: the gate map's key.
        let token: String
        let options: APNsSendOptions
        var machine: APNsRetryStateMachine
        var lastError: HTTP2Error?
        /// Apple's last answer: returned when retrying stops after a wait without one (an open
        /// circuit, a lost connection), so the caller still sees Apple's status and reason.
        var lastResponse: APNsResponse?
        /// Whether this notification holds its device token's gate slot.
        var holdsGateTurn = false
        /// Whether it failed for its token's reason (then it is never the breaker's half-open trial).
        var hadTokenFailure = false
        /// Whether the retry deadline passed while the token's gate held it.
        var heldByGate = false
        /// Whether the send went to ``APNsSendOptions/fallbackCredentials`` (key rotation).
        var onFallback = false

        init(request: APNsRequest, bundleID: String, options: APNsSendOptions, machine: APNsRetryStateMachine) {
            self.request = request
            self.bundleID = bundleID
            self.token = request.deviceToken.hex
            self.options = options
            self.machine = machine
        }
    }

    /// One attempt's result: Apple's answer, or the event for the retry machine when none came.
    struct Attempt {
        enum Result {
            /// Apple answered: the retry machine's event is the answer's status and reason.
            case answered(Answered)
            /// No answer: what happened instead.
            case failed(APNsRetryStateMachine.Event)
        }

        let result: Result
        let started: ContinuousClock.Instant

        /// The event for the retry machine.
        var event: APNsRetryStateMachine.Event {
            switch result {
            case .answered(let answered): .response(status: answered.response.status, reason: answered.response.reason)
            case .failed(let event): event
            }
        }

        /// Apple's answer, if one came.
        var answered: Answered? {
            if case .answered(let answered) = result { answered } else { nil }
        }
    }

    /// Apple's answer to an attempt, the connection it came on and the JWT it carried.
    struct Answered {
        var response: APNsResponse
        let connection: PooledConnection
        let jwt: APNsJWT?
    }

    private func retryMachine(for request: APNsRequest, options: APNsSendOptions) -> APNsRetryStateMachine {
        let deadline = options.retryDeadline ?? retryDeadline(for: request)
        let retry = configuration.retry
        return APNsRetryStateMachine(
            policy: .init(backoff: retry.backoff, tooManyRequestsDelay: retry.tooManyRequestsDelay,
                          providerTokenUpdateDelay: retry.providerTokenUpdateDelay, maxUnprocessedResends: retry.maxUnprocessedResends),
            deadlineMilliseconds: Int64((deadline.timeIntervalSince1970 * 1000).rounded(.down)))
    }

    // MARK: Key rotation

    /// The pool the send starts on: the fallback key's when `credentials` (a key being rotated in) were
    /// refused for this bundle ID and their retry time has not come (``APNsKeyFallbacks``).
    private func startingPool(_ credentials: APNsCredentials, environment: APNsEnvironment, _ send: inout SendState) -> APNsConnectionPool {
        if let fallback = send.options.fallbackCredentials, keyFallbacks.withLock({
            !$0.isEmpty && $0.sendsToFallback(key: credentials.identity, bundleID: send.bundleID, now: configuration.clock.nowMilliseconds())
        }) {
            send.onFallback = true
            metrics.keyFallbacks.increment(labels: [credentials.keyID])
            return pool(for: fallback, environment: environment)
        }
        return pool(for: credentials, environment: environment)
    }

    /// On a key with a fallback: Apple's final answer `response` to `attempt`, when it blames the key
    /// (``APNsKeyFallbacks/fallsBack(status:reason:)``), moves the send to the fallback key's pool,
    /// returned; no final failure, no device token touched. Any other answer tells that the key
    /// serves (a remembered refusal ends).
    private func fallBack(
        after response: APNsResponse, _ attempt: Attempt, _ send: inout SendState, pool: APNsConnectionPool
    ) -> APNsConnectionPool? {
        guard let fallback = send.options.fallbackCredentials, !send.onFallback, attempt.answered != nil else { return nil }
        let key = pool.credentials
        guard let reason = response.reason, APNsKeyFallbacks.fallsBack(status: response.status, reason: reason) else {
            if let ended = keyFallbacks.withLock({ $0.isEmpty ? nil : $0.accept(key: key.identity, bundleID: send.bundleID) }) {
                logger.info("APNs accepts the key being rotated in again", [
                    "key_id": ended.keyID, "team_id": ended.teamID, "bundle_id": ended.bundleID, "refusals": "\(ended.refusals)",
                ])
            }
            return nil
        }
        let now = configuration.clock.nowMilliseconds()
        let refusal = keyFallbacks.withLock {
            $0.refuse(key: key.identity, keyID: key.keyID, teamID: key.teamID, bundleID: send.bundleID, fallbackKeyID: fallback.keyID,
                      reason: reason, now: now)
        }
        metrics.keyFallbacks.increment(labels: [key.keyID])
        if let refusal {
            logger.error("APNs refused the key being rotated in: this bundle ID's sends go to the key before it until the retry", [
                "key_id": refusal.keyID, "team_id": refusal.teamID, "bundle_id": refusal.bundleID, "fallback_key_id": refusal.fallbackKeyID,
                "reason": reason.rawValue, "status": "\(response.status)", "retry_in_ms": "\(refusal.retryAt - now)",
            ])
        }
        send.onFallback = true
        // The new key's refusal is never the send's answer, not even at the retry deadline.
        send.lastResponse = nil
        return self.pool(for: fallback, environment: pool.environment)
    }

    // MARK: Device gate

    /// Takes the device token's gate: at once while it is open; in line (without holding the caller's
    /// permit, `APNsRetryWaiter.waitForDeviceGate`) while it is closed, then the gate's backoff once,
    /// within the retry deadline. Returns the stop when the deadline does not allow the wait.
    private func passDeviceGate(_ send: inout SendState) async throws -> APNsRetryStateMachine.Stop? {
        let passed: APNsDeviceGateKeeper.Pass
        let token = send.token
        if gates.isClosed(token) {
            metrics.increment("device_gate_waits")
            let gates = self.gates
            if let waiter = send.options.waiter {
                passed = try await waiter.waitForDeviceGate(attemptsSoFar: send.machine.attempts) { try await gates.pass(token) }
            } else {
                passed = try await gates.pass(token)
            }
        } else {
            passed = try await gates.pass(token)
        }
        guard case .turn(let notBefore) = passed else { return nil }
        send.holdsGateTurn = true
        let wait = notBefore - APNsConnectionPool.monotonicMilliseconds()
        guard wait > 0 else { return nil }
        if configuration.clock.nowMilliseconds() + wait > send.machine.deadlineMilliseconds {
            send.heldByGate = true
            return .retryHorizonExceeded
        }
        try await pause(.milliseconds(wait), gates.closedBecause(token), send)
        return nil
    }

    /// Hands the device's slot on (while the breaker holds every send).
    private func handOnGateTurn(_ send: inout SendState) {
        guard send.holdsGateTurn else { return }
        send.holdsGateTurn = false
        gates.finish(send.token, holdsTurn: true, outcome: .other)
    }

    // MARK: One attempt

    /// Sends once on `pool` and classifies what happened; nil when the connection it got had to be
    /// retired first (its JWT could neither be kept nor changed): the caller tries again at once.
    private func attempt(_ send: inout SendState, pool: APNsConnectionPool, isTrial: Bool) async throws -> Attempt? {
        let started = ContinuousClock.now
        do {
            let request = send.request
            guard let exchanged = try await attemptExchange(on: pool, started: started, circuitTrial: isTrial, request: { authorization in
                makeRequest(request, pool: pool, authorization: authorization)
            }) else { return nil }
            var response = APNsResponse(status: exchanged.raw.status, headers: exchanged.raw.headers, body: exchanged.raw.body)
            response.attempts = send.machine.attempts + 1
            response.unprocessedResends = send.machine.unprocessedResends
            send.lastResponse = response
            return Attempt(result: .answered(Answered(response: response, connection: exchanged.connection, jwt: exchanged.jwt)), started: started)
        } catch AttemptFailure.circuitOpen(let wait) {
            return Attempt(result: .failed(.circuitOpen(wait: wait)), started: started)
        } catch AttemptFailure.noConnection(let error) {
            if Task.isCancelled { throw CancellationError() }
            send.lastError = error
            pool.recordFailure(on: nil)
            metrics.increment("no_connection")
            return Attempt(result: .failed(.noConnection), started: started)
        } catch AttemptFailure.sent(let error, let connection, let sentAt) {
            let event = try streamFailed(error, on: connection, sentAt: sentAt, isTrial: isTrial, &send, pool: pool)
            return Attempt(result: .failed(event), started: started)
        }
    }

    /// Performs what a stream's failure means (``APNsStreamFailure``) and returns the retry machine's event.
    private func streamFailed(
        _ error: HTTP2Error, on connection: PooledConnection, sentAt: ContinuousClock.Instant, isTrial: Bool, _ send: inout SendState,
        pool: APNsConnectionPool
    ) throws -> APNsRetryStateMachine.Event {
        switch try streamFailure(error, on: connection, sentAt: sentAt, pool: pool, feedsBreaker: true) {
        case .cancelled:
            throw CancellationError()
        case .notProcessed:
            return .notProcessed
        case .timedOut:
            // The device token's failure: its gate closes. Not the circuit breaker's, unless the
            // connection answers nothing else and its PING goes unanswered (the pool's).
            send.lastError = error
            metrics.countAttempt(status: nil)
            if isTrial { pool.abandonTrial() }
            return .streamTimeout
        case .connectionLost:
            send.lastError = error
            metrics.countAttempt(status: nil)
            return .connectionLost
        case .unexpected:
            throw APNsError(code: .deliveryFailed, message: "APNs request failed: \(error.message)", cause: error, attempts: send.machine.attempts)
        }
    }

    /// Counts the attempt, feeds the circuit breaker and the device token's gate. Returns whether it
    /// failed for its device token's reason (the gate then imposes the wait).
    private func observe(_ attempt: Attempt, _ send: inout SendState, pool: APNsConnectionPool) -> Bool {
        switch attempt.event {
        case .notProcessed, .noConnection, .circuitOpen:
            break
        default:
            let answered = attempt.answered
            let status = answered.map { String($0.response.status) } ?? "none"
            let reasonLabel = answered.map { $0.response.reason?.rawValue ?? "" } ?? (attempt.event == .streamTimeout ? "timeout" : "connection_error")
            metrics.requestsTotal.increment(labels: [send.bundleID, send.request.pushType.rawValue, status, reasonLabel])
            metrics.requestDuration.observe(attempt.started.duration(to: .now).inSeconds, labels: [send.request.pushType.rawValue])
        }
        if let answered = attempt.answered {
            metrics.countAttempt(status: answered.response.status)
            if Self.isAppleWideFailure(status: answered.response.status, reason: answered.response.reason) {
                pool.recordFailure(on: answered.connection)
            } else {
                pool.recordAnswer()
            }
            if !answered.response.isSuccess { record(answered.response) }
        }
        // The device gate learns the outcome: a token failure closes it (or, for the slot's holder,
        // backs it off further); the slot passes to the next in line.
        let gateOutcome = Self.gateOutcome(of: attempt.event)
        let isTokenFailure = gateOutcome == .tokenFailure || gateOutcome == .streamTimeout
        if isTokenFailure {
            send.hadTokenFailure = true
            if !send.holdsGateTurn { metrics.increment("device_gate_closings") }
        }
        if send.holdsGateTurn || isTokenFailure {
            gates.finish(send.token, holdsTurn: send.holdsGateTurn, outcome: gateOutcome)
            send.holdsGateTurn = false
        }
        return isTokenFailure
    }

    // MARK: The retry machine's action

    /// Performs `action`: returns the final response, nil to try again, or throws the final error.
    private func perform(
        _ action: APNsRetryStateMachine.Action, _ attempt: Attempt, isTokenFailure: Bool, _ send: SendState, pool: APNsConnectionPool
    ) async throws -> APNsResponse? {
        switch (action, attempt.result) {
        case (.delivered, .answered(let answered)):
            var response = answered.response
            response.attempts = send.machine.attempts
            return response
        case (.delivered, .failed):
            // The machine delivers only Apple's 200 (`APNsRetryStateMachine`); as after an open
            // circuit, anything else tries again.
            return nil
        case (.stop(let why), .failed):
            return try gaveUp(why, send, pool: pool)
        case (.stop(let why), .answered(let answered)):
            var response = answered.response
            response.attempts = send.machine.attempts
            if why == .providerTokenFault, let reason = response.reason {
                providerTokenFault(reason, response: response, jwt: answered.jwt, pool: pool)
            }
            return response
        case (.retry(let delay, let reason, let change), _):
            if case .answered(let answered) = attempt.result, let final = changeConnection(change, answered, send, pool: pool) { return final }
            // After a token failure the token's gate imposes the wait (one backoff for all its
            // notifications), counted as a retry where it is waited.
            if isTokenFailure { return nil }
            if let reason, delay > .zero {
                try await pause(delay, reason, send)
            } else {
                if attempt.event != .notProcessed { metrics.increment("retries") }
                let label: String
                switch (attempt.event, change) {
                case (.notProcessed, _): label = "unprocessed"
                case (_, .retireAndRenewProviderToken): label = "provider_token_renewed"
                case (_, .newConnectionForTopic): label = "topic_disallowed"
                default: label = "new_connection"
                }
                metrics.retriesTotal.increment(labels: [label])
            }
            return nil
        }
    }

    /// Performs the connection change a retry asks for after Apple's answer; returns that answer as
    /// final when the change cannot be made (no other connection for the topic, or a JWT that could
    /// not be renewed: a provider fault, reported). After no answer there is no connection to change.
    private func changeConnection(
        _ change: APNsRetryStateMachine.ConnectionChange, _ answered: Answered, _ send: SendState, pool: APNsConnectionPool
    ) -> APNsResponse? {
        var final = answered.response
        final.attempts = send.machine.attempts
        switch change {
        case .none:
            return nil
        case .retire:
            retire(answered.connection, answered: answered.response.status, answered.response.reason, pool: pool)
            return nil
        case .newConnectionForTopic:
            return pool.replaceConnectionsForTopic(answeredOn: answered.connection) ? nil : final
        case .restorePreviousProviderToken:
            if let rejected = answered.jwt { pool.restorePreviousProviderToken(on: answered.connection, rejected: rejected) }
            return nil
        case .retireAndRenewProviderToken:
            guard let rejected = answered.jwt, let cache = pool.credentials.providerTokens,
                  renewProviderToken(rejected, cache: cache, response: answered.response, pool: pool)
            else { return final }
            return nil
        }
    }

    // MARK: Waiting and giving up

    private func pause(_ delay: Duration, _ reason: APNsRetryReason, _ send: SendState) async throws {
        if reason != .circuitOpen { metrics.increment("retries") }
        metrics.increment("retries_\(reason.metricLabel)")
        metrics.retriesTotal.increment(labels: [reason.metricLabel])
        if let waiter = send.options.waiter {
            try await waiter.wait(delay, attemptsSoFar: send.machine.attempts, reason: reason)
        } else {
            try await Task.sleep(for: delay)
        }
    }

    /// Retrying stopped without an answer to return: Apple's last answer when the retry deadline
    /// passed after one, else the error.
    private func gaveUp(_ why: APNsRetryStateMachine.Stop, _ send: SendState, pool: APNsConnectionPool) throws -> APNsResponse {
        if why == .retryHorizonExceeded, var response = send.lastResponse {
            response.attempts = send.machine.attempts
            response.unprocessedResends = send.machine.unprocessedResends
            return response
        }
        throw stopError(why, send, pool: pool)
    }

    private func stopError(_ why: APNsRetryStateMachine.Stop, _ send: SendState, pool: APNsConnectionPool) -> APNsError {
        let machine = send.machine
        let attempts = machine.attempts
        let lastError = send.lastError
        switch why {
        case .tooManyUnprocessedResends:
            return APNsError(code: .deliveryFailed, message: "sent \(machine.unprocessedResends) times without APNs processing it", cause: lastError, attempts: attempts)
        case .retryHorizonExceeded where send.heldByGate:
            return APNsError(code: .retryHorizonExceeded, message: "the retry deadline passed while the device token's gate held it (its 429 TooManyRequests or timed-out streams) after \(attempts) attempts", cause: lastError, attempts: attempts)
        case .retryHorizonExceeded where machine.lastEventWasCircuitOpen || lastError == nil:
            return APNsError(code: .retryHorizonExceeded, message: "the retry deadline passed while the circuit breaker held every send to \(pool.endpoint.host)", cause: lastError, attempts: attempts)
        default:
            return APNsError(code: .retryHorizonExceeded, message: "no answer from APNs before the retry deadline after \(attempts) attempts: \(lastError?.message ?? "no connection")", cause: lastError, attempts: attempts)
        }
    }
}
