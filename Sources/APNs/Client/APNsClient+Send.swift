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

    /// One attempt's result: the event for the retry machine, and Apple's answer if one came.
    struct Attempt {
        let event: APNsRetryStateMachine.Event
        var answered: Answered?
        let started: ContinuousClock.Instant
    }

    /// Apple's answer to an attempt, the connection it came on and the JWT it carried.
    struct Answered {
        var response: APNsResponse
        let connection: PooledConnection
        let jwt: APNsJWT?
    }

    /// How one attempt failed before an answer.
    enum AttemptFailure: Error {
        /// No connection (or no free stream) within the attempt's budget: nothing was sent.
        case noConnection(HTTP2Error)
        /// The stream on `connection`, sent at the instant given, failed.
        case sent(HTTP2Error, PooledConnection, ContinuousClock.Instant)
        /// The circuit breaker opened while waiting for a stream: nothing sent.
        case circuitOpen(Duration)
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
            guard let answered = try await exchange(send, pool: pool, isTrial: isTrial, started: started) else { return nil }
            send.lastResponse = answered.response
            return Attempt(event: .response(status: answered.response.status, reason: answered.response.reason), answered: answered, started: started)
        } catch AttemptFailure.circuitOpen(let wait) {
            return Attempt(event: .circuitOpen(wait: wait), started: started)
        } catch AttemptFailure.noConnection(let error) {
            if Task.isCancelled { throw CancellationError() }
            send.lastError = error
            pool.recordFailure(on: nil)
            metrics.increment("no_connection")
            return Attempt(event: .noConnection, started: started)
        } catch AttemptFailure.sent(let error, let connection, let sentAt) {
            let event = try streamFailed(error, on: connection, sentAt: sentAt, isTrial: isTrial, &send, pool: pool)
            return Attempt(event: event, started: started)
        }
    }

    /// Leases a stream, chooses the JWT, sends, and returns Apple's answer.
    /// - Throws: ``AttemptFailure`` when nothing was answered; `APNsError` `.signingFailed`.
    private func exchange(_ send: SendState, pool: APNsConnectionPool, isTrial: Bool, started: ContinuousClock.Instant) async throws -> Answered? {
        let budget = APNsAttemptBudget(requestTimeout: configuration.requestTimeout, connectTimeout: configuration.connectTimeout)
        let connection: PooledConnection
        do {
            connection = try await pool.acquire(waitingAtMost: budget.total)
        } catch let error as HTTP2Error {
            throw AttemptFailure.noConnection(error)
        }
        // The breaker may have opened while this caller waited for a stream: it must not send.
        if APNsCircuitAdmission.mustAskAgain(isTrial: isTrial, circuit: pool.circuitState), case .wait(let wait) = pool.admit() {
            pool.release(connection, status: nil)
            throw AttemptFailure.circuitOpen(wait)
        }
        let choice: APNsConnectionPool.ProviderTokenChoice
        do {
            choice = try pool.providerToken(for: connection)
        } catch {
            pool.release(connection, status: nil)
            throw error
        }
        let jwt: APNsJWT?
        let authorization: String?
        switch choice {
        case .certificate:
            (jwt, authorization) = (nil, nil)
        case .send(let token, let value):
            (jwt, authorization) = (token, value)
        case .retireConnection:
            pool.release(connection, status: nil)
            pool.retire(connection, cause: "jwt", because: "its JWT can neither be kept nor changed yet")
            return nil
        }
        let timeout = budget.streamTimeout(afterWaiting: started.duration(to: .now))
        let raw: HTTP2Response
        let sentAt = ContinuousClock.now
        do {
            raw = try await connection.connection.send(makeRequest(send.request, pool: pool, authorization: authorization), timeout: timeout)
        } catch let error as HTTP2Error {
            pool.release(connection, status: nil)
            throw AttemptFailure.sent(error, connection, sentAt)
        } catch {
            pool.release(connection, status: nil)
            throw error
        }
        pool.release(connection, status: raw.status)
        var response = APNsResponse(status: raw.status, headers: raw.headers, body: raw.body)
        response.attempts = send.machine.attempts + 1
        response.unprocessedResends = send.machine.unprocessedResends
        return Answered(response: response, connection: connection, jwt: jwt)
    }

    /// Performs what a stream's failure means (``APNsStreamFailure``) and returns the retry machine's event.
    private func streamFailed(
        _ error: HTTP2Error, on connection: PooledConnection, sentAt: ContinuousClock.Instant, isTrial: Bool, _ send: inout SendState,
        pool: APNsConnectionPool
    ) throws -> APNsRetryStateMachine.Event {
        switch APNsStreamFailure.classify(error, connectionUsable: connection.connection.isUsable, taskCancelled: Task.isCancelled) {
        case .cancelled:
            throw CancellationError()
        case .notProcessed(let retire):
            metrics.increment("unprocessed_resends")
            if retire { pool.retire(connection, cause: "goaway", because: "going away") }
            return .notProcessed
        case .timedOut:
            // The device token's failure: its gate closes. Not the circuit breaker's, unless the
            // connection answers nothing else and its PING goes unanswered (the pool's).
            send.lastError = error
            metrics.countAttempt(status: nil)
            metrics.increment("timeouts")
            pool.streamTimedOut(on: connection, started: sentAt)
            if isTrial { pool.abandonTrial() }
            return .streamTimeout
        case .connectionLost(let retire):
            send.lastError = error
            metrics.countAttempt(status: nil)
            metrics.increment("connection_errors")
            pool.recordFailure(on: connection)
            if retire { pool.retire(connection, cause: "request_failed", because: "request failed: \(error.code)") }
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
        switch action {
        case .delivered:
            var response = attempt.answered!.response
            response.attempts = send.machine.attempts
            return response
        case .stop(let why):
            guard var response = attempt.answered?.response else { return try gaveUp(why, send, pool: pool) }
            response.attempts = send.machine.attempts
            if why == .providerTokenFault, let reason = response.reason {
                providerTokenFault(reason, response: response, jwt: attempt.answered?.jwt, pool: pool)
            }
            return response
        case .retry(let delay, let reason, let change):
            if let final = changeConnection(change, attempt, send, pool: pool) { return final }
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

    /// Performs the connection change a retry asks for; returns Apple's answer as final when the
    /// JWT could not be renewed (a provider fault, reported).
    private func changeConnection(
        _ change: APNsRetryStateMachine.ConnectionChange, _ attempt: Attempt, _ send: SendState, pool: APNsConnectionPool
    ) -> APNsResponse? {
        switch change {
        case .none:
            return nil
        case .retire:
            if let answered = attempt.answered {
                pool.retire(answered.connection, cause: "retry_on_new_connection",
                            because: "APNs answered \(answered.response.status) \(answered.response.reason?.rawValue ?? "")")
            }
            return nil
        case .newConnectionForTopic:
            guard let answered = attempt.answered, pool.replaceConnectionsForTopic(answeredOn: answered.connection) else {
                var response = attempt.answered!.response
                response.attempts = send.machine.attempts
                return response
            }
            return nil
        case .restorePreviousProviderToken:
            if let answered = attempt.answered, let rejected = answered.jwt {
                pool.restorePreviousProviderToken(on: answered.connection, rejected: rejected)
            }
            return nil
        case .retireAndRenewProviderToken:
            guard let answered = attempt.answered, let rejected = answered.jwt, let cache = pool.credentials.providerTokens,
                  renewProviderToken(rejected, cache: cache, response: answered.response, pool: pool)
            else {
                var response = attempt.answered!.response
                response.attempts = send.machine.attempts
                return response
            }
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
