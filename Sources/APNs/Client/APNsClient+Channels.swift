import Foundation
import HTTP2
import PushDomain
import ServiceCore

// MARK: Broadcast channels (docs/apns-protocol.md §8, docs/apns-client.md "Broadcast channels")

extension APNsClient {
    /// Creates a Live Activity broadcast channel: `POST /1/apps/<bundle id>/channels` with
    /// `{"message-storage-policy":0|1,"push-type":"LiveActivity"}` on the channel-management host
    /// (`Configuration.channelsProduction`/`channelsSandbox`). Apple answers 201 with the new id in
    /// ``APNsChannelAnswer/channelID``; 400 `CannotCreateChannelConfig` past the app's limit (10,000
    /// per environment).
    ///
    /// Apple's refusals are answers (``APNsChannelAnswer/status`` and ``APNsChannelAnswer/reason``),
    /// never errors; 429, 500 and 503 are retried first (``APNsChannelRetry``). A create whose answer
    /// was lost is not sent again (it may have created the channel).
    /// - Parameters:
    ///   - bundleID: the app's bare bundle ID.
    ///   - environment: where the channel lives (a channel belongs to one environment).
    ///   - policy: Apple's message-storage policy.
    ///   - options: the credentials (``APNsSendOptions/credentials``, the credentials registry's choice
    ///     for the bundle ID), the retry deadline (default now + `retryHorizon.immediate`) and the waiter.
    /// - Throws: `APNsError` only when no answer came: `.missingCredentials`; `.unconfirmed` (sent, no
    ///   answer, `attempts` 1); `.retryHorizonExceeded` or `.deliveryFailed` (nothing answered within
    ///   the deadline); `.tooManyQueuedRequests`; `.shutDown`. `CancellationError`.
    public func createChannel(
        bundleID: String, environment: APNsEnvironment, policy: APNsMessageStoragePolicy, options: APNsSendOptions = .init()
    ) async throws -> APNsChannelAnswer {
        let body = Array(#"{"message-storage-policy":\#(policy.rawValue),"push-type":"LiveActivity"}"#.utf8)
        return try await channelRequest(
            .create, bundleID: bundleID, environment: environment, method: "POST", path: Self.channelsPath(bundleID), channelID: nil,
            body: body, options: options)
    }

    /// Reads a channel: `GET /1/apps/<bundle id>/channels` with `apns-channel-id`. Apple answers 200
    /// with its policy (``APNsChannelAnswer/messageStoragePolicy``), or 400 `ChannelNotRegistered`,
    /// `BadChannelId`, `MissingChannelId`. Retried as ``createChannel(bundleID:environment:policy:options:)``,
    /// and also after a lost answer.
    /// - Throws: as ``createChannel(bundleID:environment:policy:options:)``, never `.unconfirmed`.
    public func readChannel(
        bundleID: String, environment: APNsEnvironment, channelID: String, options: APNsSendOptions = .init()
    ) async throws -> APNsChannelAnswer {
        try await channelRequest(
            .read, bundleID: bundleID, environment: environment, method: "GET", path: Self.channelsPath(bundleID), channelID: channelID,
            body: [], options: options)
    }

    /// Deletes a channel: `DELETE /1/apps/<bundle id>/channels` with `apns-channel-id`. Apple answers
    /// 204, or 400 `ChannelNotRegistered` when it does not know the channel (deleted already).
    /// Retried as ``readChannel(bundleID:environment:channelID:options:)``.
    /// - Throws: as ``readChannel(bundleID:environment:channelID:options:)``.
    public func deleteChannel(
        bundleID: String, environment: APNsEnvironment, channelID: String, options: APNsSendOptions = .init()
    ) async throws -> APNsChannelAnswer {
        try await channelRequest(
            .delete, bundleID: bundleID, environment: environment, method: "DELETE", path: Self.channelsPath(bundleID), channelID: channelID,
            body: [], options: options)
    }

    /// Lists the app's channels in `environment`: `GET /1/apps/<bundle id>/all-channels`; 200 with
    /// the ids in ``APNsChannelAnswer/channelIDs``. Retried as ``readChannel(bundleID:environment:channelID:options:)``.
    /// - Throws: as ``readChannel(bundleID:environment:channelID:options:)``.
    public func listChannels(bundleID: String, environment: APNsEnvironment, options: APNsSendOptions = .init()) async throws -> APNsChannelAnswer {
        try await channelRequest(
            .list, bundleID: bundleID, environment: environment, method: "GET", path: "/1/apps/\(bundleID)/all-channels", channelID: nil,
            body: [], options: options)
    }

    /// Broadcasts to every device subscribed to a channel: `POST /4/broadcasts/apps/<bundle id>` on the
    /// broadcast host (`Configuration.broadcastProduction`/`broadcastSandbox`). Apple answers 200 with
    /// ``APNsChannelAnswer/apnsUniqueID``, or refuses (`ChannelNotRegistered`, `BadExpirationDate`,
    /// `PayloadTooLarge`, …: an answer, not an error).
    ///
    /// **At most once**: sent again only when it provably never reached Apple (no connection, no
    /// stream, or a stream Apple did not process); any answer is final, even 500 or 503, and a lost
    /// answer throws `.unconfirmed`.
    /// - Parameters:
    ///   - request: the broadcast (sent as given: check it first).
    ///   - environment: the channel's environment.
    ///   - options: credentials, waiter, and the deadline for sending it at all (default from its
    ///     `apns-expiration`, ``APNsRetryHorizon``).
    /// - Throws: `APNsError` `.unconfirmed` (sent, no answer: Apple may have it; `attempts` 1);
    ///   `.retryHorizonExceeded` or `.deliveryFailed` with `attempts` 0 (never reached Apple);
    ///   `.missingCredentials`; `.tooManyQueuedRequests`; `.shutDown`. `CancellationError` when the
    ///   caller was cancelled, possibly after the request left (never sent again by the client).
    public func broadcast(_ request: APNsBroadcastRequest, environment: APNsEnvironment, options: APNsSendOptions = .init()) async throws -> APNsChannelAnswer {
        var headers: [HTTP2Header] = []
        if let pushType = request.pushType { headers.append(HTTP2Header("apns-push-type", pushType.rawValue)) }
        headers.append(HTTP2Header("apns-priority", request.priority.description))
        if let expiration = request.expiration.headerValue { headers.append(HTTP2Header("apns-expiration", expiration)) }
        var options = options
        if options.retryDeadline == nil {
            let now = Date(timeIntervalSince1970: TimeInterval(configuration.clock.nowMilliseconds()) / 1000)
            options.retryDeadline = configuration.retryHorizon.deadline(for: request.expiration, now: now)
        }
        return try await channelRequest(
            .broadcast, bundleID: request.bundleID, environment: environment, method: "POST", path: request.path,
            channelID: request.channelID, requestID: request.apnsRequestID, headers: headers, body: request.payload, options: options)
    }

    static func channelsPath(_ bundleID: String) -> String { "/1/apps/\(bundleID)/channels" }

    // MARK: One request, its attempts

    /// Sends one channel-API request through the pool of its service under the bundle ID's
    /// credentials and performs ``APNsChannelRetry``'s decisions.
    private func channelRequest(
        _ kind: APNsChannelRetry.Request, bundleID: String, environment: APNsEnvironment, method: String, path: String,
        channelID: String?, requestID: APNsID? = nil, headers: [HTTP2Header] = [], body: [UInt8], options: APNsSendOptions
    ) async throws -> APNsChannelAnswer {
        let credentials = try credentialChoice.credentials(chosen: options.credentials, bundleID: bundleID, topic: bundleID)
        let pool = pool(for: credentials, environment: environment, service: kind == .broadcast ? .broadcast : .channels)
        let now = configuration.clock.nowMilliseconds()
        let deadline = options.retryDeadline.map { Int64(($0.timeIntervalSince1970 * 1000).rounded(.down)) }
            ?? now + configuration.retryHorizon.immediate.wholeMilliseconds
        var retry = APNsChannelRetry(
            request: kind, backoff: configuration.retry.backoff, maxUnprocessedResends: configuration.retry.maxUnprocessedResends,
            deadlineMilliseconds: deadline)
        // One apns-request-id for every attempt: Apple's logs tie them together.
        var allHeaders = [HTTP2Header("apns-request-id", (requestID ?? .random()).uuidString)]
        if let channelID, !channelID.isEmpty { allHeaders.append(HTTP2Header("apns-channel-id", channelID)) }
        allHeaders += headers
        if !body.isEmpty { allHeaders.append(HTTP2Header("content-type", "application/json")) }
        let labels = [kind.rawValue, environment.rawValue]
        var lastAnswer: APNsChannelAnswer?
        var lastError: HTTP2Error?
        while true {
            let outcome: APNsChannelRetry.Outcome
            var answered: (answer: APNsChannelAnswer, connection: PooledConnection, jwt: APNsJWT?)?
            do {
                guard let exchanged = try await attemptExchange(on: pool, started: .now, countsEvery2xxAs200: true, request: { authorization in
                    HTTP2Request(method: method, path: path, authority: pool.authority,
                                 headers: authorization.map { allHeaders + [HTTP2Header("authorization", $0)] } ?? allHeaders, body: body)
                }) else { continue }
                let answer = APNsChannelAnswer(status: exchanged.raw.status, headers: exchanged.raw.headers, body: exchanged.raw.body, channelID: channelID)
                answered = (answer, exchanged.connection, exchanged.jwt)
                lastAnswer = answer
                outcome = .answered(answer)
                metrics.channelRequests.increment(labels: labels + [String(answer.status), answer.reason?.rawValue ?? ""])
                if let reason = answer.reason { metrics.increment("reason_\(reason.rawValue)") }
            } catch AttemptFailure.noConnection(let error) {
                if Task.isCancelled { throw CancellationError() }
                lastError = error
                metrics.increment("no_connection")
                outcome = .notSent
            } catch AttemptFailure.sent(let error, let connection, let sentAt) {
                lastError = error
                // Cancelled: not an outcome, thrown. A broadcast may have left already, so a caller that
                // may run again keeps its own record of having sent it (the dispatcher's intent row).
                let failure = try streamFailure(error, on: connection, sentAt: sentAt, pool: pool, feedsBreaker: false)
                outcome = if case .notProcessed = failure { .notProcessed } else { .lost }
                if outcome == .lost { metrics.channelRequests.increment(labels: labels + ["none", "no_answer"]) }
            }
            switch retry.handle(outcome, nowMilliseconds: configuration.clock.nowMilliseconds()) {
            case .final(let answer):
                return answer
            case .retry(let delay, let change):
                if let answered, let final = changeConnection(change, answered, attempts: retry.attempts, pool: pool) { return final }
                if outcome != .notProcessed { metrics.retriesTotal.increment(labels: ["channel_\(kind.rawValue)"]) }
                if delay > .zero {
                    if let waiter = options.waiter {
                        let reason: APNsRetryReason = if case .answered(let answer) = outcome { .serverError(status: answer.status) } else { .connectionFailure }
                        try await waiter.wait(delay, attemptsSoFar: retry.attempts, reason: reason)
                    } else {
                        try await Task.sleep(for: delay)
                    }
                }
            case .stop(let why):
                if why == .deadline, var answer = lastAnswer {
                    answer.attempts = retry.attempts
                    return answer
                }
                throw stopError(why, kind, retry, lastError, method: method, path: path, pool: pool)
            }
        }
    }

    /// Performs the connection change a retry asks for after Apple's `answered`; returns that answer
    /// as final when its JWT could not be renewed (a provider fault).
    private func changeConnection(
        _ change: APNsChannelRetry.ConnectionChange, _ answered: (answer: APNsChannelAnswer, connection: PooledConnection, jwt: APNsJWT?),
        attempts: Int, pool: APNsConnectionPool
    ) -> APNsChannelAnswer? {
        switch change {
        case .none:
            return nil
        case .retire:
            retire(answered.connection, answered: answered.answer.status, answered.answer.reason, pool: pool)
            return nil
        case .renewProviderToken:
            var response = APNsResponse(status: answered.answer.status, headers: [], body: [])
            response.reason = answered.answer.reason
            response.date = answered.answer.date
            guard let jwt = answered.jwt, let cache = pool.credentials.providerTokens,
                  !renewProviderToken(jwt, cache: cache, response: response, pool: pool)
            else { return nil }
            var answer = answered.answer
            answer.attempts = attempts
            return answer
        }
    }

    /// The error when retrying stops without an answer to return.
    private func stopError(
        _ why: APNsChannelRetry.Stop, _ kind: APNsChannelRetry.Request, _ retry: APNsChannelRetry, _ lastError: HTTP2Error?,
        method: String, path: String, pool: APNsConnectionPool
    ) -> APNsError {
        switch why {
        case .mayHaveBeenSent:
            return unconfirmed(kind, lastError, path: path, attempts: retry.attempts)
        case .deadline:
            return APNsError(code: .retryHorizonExceeded,
                             message: "no answer from \(pool.endpoint.host):\(pool.endpoint.port) to \(method) \(path) before the retry deadline after \(retry.attempts) attempts: \(lastError?.message ?? "no connection")",
                             cause: lastError, attempts: retry.attempts)
        case .tooManyUnprocessedResends:
            return APNsError(code: .deliveryFailed, message: "\(method) \(path) sent \(retry.unprocessedResends) times without APNs processing it",
                             cause: lastError, attempts: retry.attempts)
        }
    }

    private func unconfirmed(_ kind: APNsChannelRetry.Request, _ error: HTTP2Error?, path: String, attempts: Int) -> APNsError {
        metrics.increment("channel_unconfirmed_\(kind.rawValue)")
        return APNsError(
            code: .unconfirmed,
            message: "the \(kind.rawValue) request \(path) was sent and no answer came (\(error?.message ?? "no answer")): APNs may have carried it out; not sent again",
            cause: error, attempts: max(attempts, 1))
    }
}
