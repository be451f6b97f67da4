import APNs
import Foundation
import HTTP2
import ProtobufCodec
import PushDomain

// MARK: Channel management and broadcast (docs/apns-protocol.md §8)

extension SimulatorState {
    /// Answers a channel-management or broadcast request: authentication as for device pushes (token
    /// or certificate), the key's topic scope, the injected status shares, then `SimulatorChannels`'
    /// checks. Answers echo `apns-request-id` (generated when absent) instead of `apns-id`; a
    /// broadcast accepted also carries `apns-unique-id`.
    /// - Returns: the response and the counter it is counted under (`broadcast 200`, `channels 201`, …,
    ///   or `<status> <reason>`); a broadcast accepted adds its channel's subscribers to the counter
    ///   `broadcast_reached`.
    func answerChannelRequest(
        _ request: HTTP2ServerRequest, _ fields: Fields, _ connection: ConnectionState, environment: APNsEnvironment,
        now: Int64, box: FaultsBox, seed: UInt64, record: inout APNsSimulatorRecord
    ) -> (HTTP2ServerResponse, String) {
        var rng = SplitMix64(seed: seed)
        var requestID = rng.uuidString()
        if let sent = fields.requestID, APNsIDSyntax.isValid(sent) { requestID = sent.lowercased() }
        let isBroadcast = request.path.hasPrefix("/4/broadcasts/")
        var answer: SimulatorChannels.Answer
        if let refused = authenticate(request, fields, connection, environment: environment, now: now, faults: box.faults) {
            answer = .fail(refused.httpStatus ?? 403, refused.rawValue)
        } else if let injected = injectedReason(box, connection) {
            answer = .fail(injected.httpStatus ?? 500, injected.rawValue)
            record.fault = "injected"
        } else {
            let headers = SimulatorChannels.Headers(
                channelID: fields.channelID, pushType: fields.pushType, priority: fields.priority,
                expiration: fields.expiration, requestID: fields.requestID)
            answer = shared.withLock { shared in
                shared.channels.answer(
                    method: request.method, path: request.path, headers: headers, body: request.body, environment: environment,
                    now: now, newID: { Base64.encode((0..<2).flatMap { _ in withUnsafeBytes(of: rng.next()) { Array($0) } }) })
            }
        }
        var headers = [HTTP2Header("apns-request-id", requestID), HTTP2Header("date", HTTPDate.format(secondsSinceEpoch: clock.nowSeconds()))]
        headers += answer.headers
        record.status = answer.status
        record.reason = answer.reason
        record.apnsID = requestID
        let counter: String
        if let reason = answer.reason {
            headers.append(HTTP2Header("content-type", "application/json"))
            counter = "\(answer.status) \(reason)"
            return (HTTP2ServerResponse(status: answer.status, headers: headers, body: APNsErrorResponse(reason: APNsReason(rawValue: reason)).body),
                    counter)
        }
        connection.trust()
        if isBroadcast {
            headers.append(HTTP2Header("apns-unique-id", rng.uuidString()))
            recorder.count("broadcast_reached", by: answer.reached)
            counter = "broadcast \(answer.status)"
        } else {
            counter = "channels \(answer.status)"
        }
        if !answer.body.isEmpty { headers.append(HTTP2Header("content-type", "application/json")) }
        return (HTTP2ServerResponse(status: answer.status, headers: headers, body: answer.body), counter)
    }

    /// Token authentication with the key's topic scope, for the bundle ID in the path; certificate
    /// connections must name the bundle ID among their topics.
    private func authenticate(
        _ request: HTTP2ServerRequest, _ fields: Fields, _ connection: ConnectionState, environment: APNsEnvironment,
        now: Int64, faults: APNsSimulatorFaults
    ) -> APNsReason? {
        let parts = request.path.split(separator: "/")
        let bundleID = parts.count >= 4 ? String(parts[request.path.hasPrefix("/4/") ? 3 : 2]) : ""
        if let certificate = connection.certificate {
            return certificate.topics.contains(bundleID) || bundleID.isEmpty ? nil : .topicDisallowed
        }
        if let failure = checkProviderToken(fields.authorization, connection, environment: environment, now: now,
                                            expiredThroughIat: faults.providerTokensExpiredThroughIat) {
            return failure
        }
        if topicScopesInUse.load(ordering: .relaxed), let scope = connection.fields.withLock({ $0.boundTopics }),
           !bundleID.isEmpty, !scope.contains(bundleID) {
            return .topicDisallowed
        }
        return nil
    }

    /// The answer the faults in force inject for this request (`status_shares`, `reason_shares`), one
    /// draw of the connection's generator; nil when none is drawn (device pushes and channel requests).
    func injectedReason(_ box: FaultsBox, _ connection: ConnectionState) -> APNsReason? {
        guard !box.injectedShares.isEmpty else { return nil }
        let draw = connection.fields.withLock { $0.rng.unit() }
        var bound = 0.0
        for (reason, share) in box.injectedShares {
            bound += share
            if draw < bound { return reason }
        }
        return nil
    }

    /// Sets a channel's subscriber count: what one broadcast to it reaches.
    /// - Throws: `APNsSimulatorError` `.invalidConfiguration` when no channel has `channelID` or the
    ///   count is negative.
    func setSubscribers(_ count: Int, channelID: String) throws(APNsSimulatorError) {
        guard count >= 0 else { throw APNsSimulatorError(.invalidConfiguration, "subscribers must be 0 or more, not \(count)") }
        guard shared.withLock({ $0.channels.setSubscribers(count, channelID: channelID) }) else {
            throw APNsSimulatorError(.invalidConfiguration, "no channel has id \(channelID)")
        }
    }

    /// Turns broadcast off (`FeatureNotEnabled`) or on for a bundle ID.
    func setBroadcastEnabled(_ enabled: Bool, bundleID: String) {
        shared.withLock { shared in
            if enabled { shared.channels.disabledBundleIDs.remove(bundleID) } else { shared.channels.disabledBundleIDs.insert(bundleID) }
        }
    }

    /// Every channel, oldest first, in the admin API's JSON form.
    func channelsJSON() -> JSONValue {
        .array(shared.withLock { $0.channels.all }.map { channel in
            .sortedObject([
                "channel_id": .string(channel.id), "bundle_id": .string(channel.bundleID),
                "environment": .string(channel.environment.rawValue), "message_storage_policy": .integer(channel.storagePolicy),
                "subscribers": .integer(channel.subscribers), "broadcasts": .integer(channel.broadcasts),
                "created_at_ms": .integer(channel.createdAtMilliseconds),
            ])
        })
    }
}
