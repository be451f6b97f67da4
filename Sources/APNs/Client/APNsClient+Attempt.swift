import HTTP2
import ServiceCore

// MARK: One attempt (docs/apns-client.md): shared by device pushes and channel requests

extension APNsClient {
    /// How one attempt failed before an answer.
    enum AttemptFailure: Error {
        /// No connection (or no free stream) within the attempt's budget: nothing was sent.
        case noConnection(HTTP2Error)
        /// The stream on `connection`, sent at the instant given, failed.
        case sent(HTTP2Error, PooledConnection, ContinuousClock.Instant)
        /// The circuit breaker opened while waiting for a stream: nothing sent.
        case circuitOpen(Duration)
    }

    /// Apple's answer to one attempt, the connection it came on and the JWT it carried (nil with a
    /// certificate).
    struct AttemptAnswer {
        let raw: HTTP2Response
        let connection: PooledConnection
        let jwt: APNsJWT?
    }

    /// One attempt of any request: leases a stream on `pool` within the attempt's budget
    /// (``APNsAttemptBudget``, counted from `started`), checks the circuit breaker again when
    /// `circuitTrial` is given (``APNsCircuitAdmission/mustAskAgain(isTrial:circuit:)``: a device push
    /// must not send once the breaker opened while it waited), chooses the provider token
    /// (``APNsConnectionPool/ProviderTokenChoice``), sends what `request` builds with that
    /// `authorization` value within the rest of the budget, and releases the stream with Apple's status
    /// (`countsEvery2xxAs200`: a channel request's 201 or 204 trusts a new token-auth connection like a
    /// device push's 200).
    /// - Returns: Apple's answer; nil when the connection it got had to be retired first (its JWT
    ///   could neither be kept nor changed): the caller tries again at once.
    /// - Throws: ``AttemptFailure`` when nothing was answered; `APNsError` `.signingFailed`.
    func attemptExchange(
        on pool: APNsConnectionPool, started: ContinuousClock.Instant, circuitTrial: Bool? = nil, countsEvery2xxAs200: Bool = false,
        request: (_ authorization: String?) -> HTTP2Request
    ) async throws -> AttemptAnswer? {
        let budget = APNsAttemptBudget(requestTimeout: configuration.requestTimeout, connectTimeout: configuration.connectTimeout)
        let connection: PooledConnection
        do {
            connection = try await pool.acquire(waitingAtMost: budget.total)
        } catch let error as HTTP2Error {
            throw AttemptFailure.noConnection(error)
        }
        if let isTrial = circuitTrial, APNsCircuitAdmission.mustAskAgain(isTrial: isTrial, circuit: pool.circuitState), case .wait(let wait) = pool.admit() {
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
        let sentAt = ContinuousClock.now
        let raw: HTTP2Response
        do {
            raw = try await connection.connection.send(request(authorization), timeout: timeout)
        } catch let error as HTTP2Error {
            pool.release(connection, status: nil)
            throw AttemptFailure.sent(error, connection, sentAt)
        } catch {
            pool.release(connection, status: nil)
            throw error
        }
        pool.release(connection, status: countsEvery2xxAs200 && (200..<300).contains(raw.status) ? 200 : raw.status)
        return AttemptAnswer(raw: raw, connection: connection, jwt: jwt)
    }

    /// Retires `connection` after Apple answered `status` `reason` on it (503 `Shutdown`, 400
    /// `IdleTimeout`: the request is retried on a new connection).
    func retire(_ connection: PooledConnection, answered status: Int, _ reason: APNsReason?, pool: APNsConnectionPool) {
        pool.retire(connection, cause: "retry_on_new_connection", because: "APNs answered \(status) \(reason?.rawValue ?? "")")
    }

    /// Performs what a failed stream means for its connection (``APNsStreamFailure``), the part every
    /// request shares: a stream Apple did not process retires a connection going away; a timed-out
    /// stream is the pool's to judge (its PING); a lost connection is retired, and fed to the circuit
    /// breaker when `feedsBreaker` (device pushes).
    /// - Returns: the classification, for the caller's own retry decision.
    /// - Throws: `CancellationError` when the caller was cancelled (not an outcome: a request that
    ///   may have left is never sent again by the client).
    func streamFailure(
        _ error: HTTP2Error, on connection: PooledConnection, sentAt: ContinuousClock.Instant, pool: APNsConnectionPool, feedsBreaker: Bool
    ) throws -> APNsStreamFailure {
        let failure = APNsStreamFailure.classify(error, connectionUsable: connection.connection.isUsable, taskCancelled: Task.isCancelled)
        switch failure {
        case .cancelled:
            throw CancellationError()
        case .notProcessed(let retire):
            metrics.increment("unprocessed_resends")
            if retire { pool.retire(connection, cause: "goaway", because: "going away") }
        case .timedOut:
            metrics.increment("timeouts")
            pool.streamTimedOut(on: connection, started: sentAt)
        case .connectionLost(let retire):
            metrics.increment("connection_errors")
            if feedsBreaker { pool.recordFailure(on: connection) }
            if retire { pool.retire(connection, cause: "request_failed", because: "request failed: \(error.code)") }
        case .unexpected:
            break
        }
        return failure
    }
}
