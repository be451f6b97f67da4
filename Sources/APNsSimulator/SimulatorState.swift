import APNs
import ES256
import Foundation
import HTTP2
import PushDomain
import ServiceCore
import Synchronization

/// The simulator's shared state: faults, token registry, per-token rate windows and the table of
/// connections, behind one `Mutex` held only for lookups and small updates; received requests live
/// in a `Recorder`. Handlers run on the HTTP/2 servers' event-loop threads.
final class SimulatorState: Sendable {
    struct TrustedKeyInfo: Sendable {
        let teamID: String
        let environment: APNsEnvironment?
    }

    /// The faults in force with what the push path derives from them, swapped as a whole so that a
    /// request copies one reference under the lock.
    final class FaultsBox: Sendable {
        let faults: APNsSimulatorFaults
        /// Injected answers and their shares, in draw order.
        let injectedShares: [(APNsReason, Double)]
        let isQuiet: Bool

        init(_ faults: APNsSimulatorFaults) {
            self.faults = faults
            injectedShares = [(APNsReason.tooManyRequests, faults.statusShares[429] ?? 0), (.internalServerError, faults.statusShares[500] ?? 0),
                              (.serviceUnavailable, faults.statusShares[503] ?? 0)].filter { $0.1 > 0 }
                + faults.reasonShares.sorted { $0.key.rawValue < $1.key.rawValue }.map { ($0.key, $0.value) }
            isQuiet = faults.isQuiet
        }
    }

    struct Shared {
        var box: FaultsBox
        /// True when a push must look at the registry or rate windows (kept in step with them).
        var registryInUse = false
        var registrations: [String: APNsSimulator.TokenRegistration] = [:]
        var invalidations: [String: APNsSimulator.TokenInvalidation] = [:]
        var rateWindows: [String: (start: Int64, count: Int)] = [:]
        var connections: [UInt64: ConnectionState] = [:]
        var newConnectionsSincePurge = 0
        /// The bundle IDs of topic-specific keys, by Key ID (changed through the admin API).
        var keyTopics: [String: Set<String>] = [:]
        /// Broadcast channels (channel-management and broadcast API).
        var channels: SimulatorChannels

        var faults: APNsSimulatorFaults { box.faults }

        mutating func updateRegistryInUse() {
            registryInUse = !registrations.isEmpty || !invalidations.isEmpty || box.faults.tokenRateLimit != nil
        }
    }

    let verifier: APNsJWTVerifier
    let keys: [String: TrustedKeyInfo]
    /// The topic scopes at start (restored by `reset`).
    let startKeyTopics: [String: Set<String>]
    /// Channels one app may have per environment (restored by `reset` with the channels emptied).
    let channelLimit: Int
    /// True once any key has had a topic scope: only then does a push look at its connection's scope.
    let topicScopesInUse: Atomic<Bool>
    let clock: any WallClock
    let initialMaxConcurrentStreams: UInt32
    let startFaults: APNsSimulatorFaults
    let startRegistrations: [APNsSimulator.TokenRegistration]
    let startInvalidations: [APNsSimulator.TokenInvalidation]
    let shared: Mutex<Shared>
    let recorder: Recorder
    /// Answers kept back by the `hold` fault, oldest first, until released.
    let held = Mutex<[HeldAnswer]>([])
    /// Returns the keys of the connections still open; set once the servers run (for purging).
    let liveConnectionKeys = Mutex<(@Sendable () -> Set<UInt64>)?>(nil)

    init(configuration: APNsSimulator.Configuration) throws(APNsSimulatorError) {
        var publicKeys: [String: ES256PublicKey] = [:]
        var keys: [String: TrustedKeyInfo] = [:]
        var keyTopics: [String: Set<String>] = [:]
        for key in configuration.trustedKeys {
            if let topics = key.topics { keyTopics[key.keyID] = Set(topics) }
            do {
                publicKeys[key.keyID] = try ES256PublicKey(pem: key.publicKeyPEM)
            } catch {
                throw APNsSimulatorError(.invalidKey, "trusted key \(key.keyID) is not an EC P-256 public key", cause: error)
            }
            keys[key.keyID] = TrustedKeyInfo(teamID: key.teamID, environment: key.environment)
        }
        verifier = APNsJWTVerifier(publicKeysByKeyID: publicKeys)
        self.keys = keys
        startKeyTopics = keyTopics
        channelLimit = configuration.channelLimit
        topicScopesInUse = Atomic(!keyTopics.isEmpty)
        clock = configuration.clock
        initialMaxConcurrentStreams = configuration.initialMaxConcurrentStreams
        startFaults = configuration.faults
        startRegistrations = configuration.registrations
        startInvalidations = configuration.invalidations
        recorder = Recorder(limit: configuration.recordLimit)
        var initial = Shared(box: FaultsBox(configuration.faults), channels: SimulatorChannels(limit: configuration.channelLimit))
        initial.keyTopics = keyTopics
        initial.updateRegistryInUse()  // a token rate limit set at start applies from the first push
        shared = Mutex(initial)
        for registration in startRegistrations { try register(registration) }
        for invalidation in startInvalidations { try invalidate(invalidation) }
    }

    // MARK: Registry and faults

    func register(_ registration: APNsSimulator.TokenRegistration) throws(APNsSimulatorError) {
        let hex = try Self.normalize(registration.token)
        var stored = registration
        stored.token = hex
        shared.withLock {
            $0.registrations[hex] = stored
            $0.updateRegistryInUse()
        }
    }

    func invalidate(_ invalidation: APNsSimulator.TokenInvalidation) throws(APNsSimulatorError) {
        let hex = try Self.normalize(invalidation.token)
        var stored = invalidation
        stored.token = hex
        shared.withLock {
            $0.invalidations[hex] = stored
            $0.updateRegistryInUse()
        }
    }

    private static func normalize(_ token: String) throws(APNsSimulatorError) -> String {
        do {
            return try DeviceToken(validating: token).hex
        } catch {
            throw APNsSimulatorError(.invalidConfiguration, "token \"\(token)\": \(error.message)")
        }
    }

    var faults: APNsSimulatorFaults { shared.withLock { $0.faults } }

    func setFaults(_ faults: APNsSimulatorFaults) {
        let box = FaultsBox(faults)
        shared.withLock {
            $0.box = box
            $0.rateWindows.removeAll()
            $0.updateRegistryInUse()
        }
    }

    /// Back to the start configuration: faults, registrations and invalidations as configured;
    /// records, counters and rate windows emptied. Open connections keep their state.
    func reset() {
        shared.withLock { shared in
            shared.box = FaultsBox(startFaults)
            shared.registrations.removeAll()
            shared.invalidations.removeAll()
            shared.rateWindows.removeAll()
            shared.keyTopics = startKeyTopics
            shared.channels = SimulatorChannels(limit: channelLimit)
            shared.updateRegistryInUse()
        }
        for registration in startRegistrations { try? register(registration) }
        for invalidation in startInvalidations { try? invalidate(invalidation) }
        recorder.reset()
        releaseHeld(token: nil)
    }

    /// Sends the held answers for `token` (lowercase hex; every held answer when nil), oldest first.
    /// - Returns: how many were released.
    @discardableResult
    func releaseHeld(token: String?) -> Int {
        let released = held.withLock { held -> [HeldAnswer] in
            let chosen = held.filter { token == nil || $0.token == token }
            held.removeAll { token == nil || $0.token == token }
            return chosen
        }
        for answer in released { answer.responder.respond(answer.response) }
        return released.count
    }

    func connectionStates() -> [ConnectionState] {
        purgeClosedConnections()
        return shared.withLock { Array($0.connections.values) }.sorted { $0.key < $1.key }
    }

    private func purgeClosedConnections() {
        guard let live = liveConnectionKeys.withLock({ $0 }) else { return }
        let open = live()
        shared.withLock { shared in
            shared.connections = shared.connections.filter { open.contains($0.key) }
            shared.newConnectionsSincePurge = 0
        }
    }

    // MARK: Device push

    /// Parsed `apns-*` and `authorization` fields of one request.
    struct Fields {
        var authorization: String?
        var topic: String?
        var pushType: String?
        var priority: String?
        var expiration: String?
        var apnsID: String?
        var collapseID: String?
        /// Channel and broadcast API: `apns-channel-id`, `apns-request-id`.
        var channelID: String?
        var requestID: String?
        var duplicate = false

        init(_ headers: [HTTP2Header]) {
            func set(_ slot: inout String?, _ value: String) {
                if slot != nil { duplicate = true } else { slot = value }
            }
            for (index, header) in headers.enumerated() {
                switch header.name {
                case "authorization": set(&authorization, header.value)
                case "apns-topic": set(&topic, header.value)
                case "apns-push-type": set(&pushType, header.value)
                case "apns-priority": set(&priority, header.value)
                case "apns-expiration": set(&expiration, header.value)
                case "apns-id": set(&apnsID, header.value)
                case "apns-collapse-id": set(&collapseID, header.value)
                case "apns-channel-id": set(&channelID, header.value)
                case "apns-request-id": set(&requestID, header.value)
                default:
                    // Another header: repeated when an earlier one has its name (a handful of headers,
                    // so a scan beats allocating a set per request).
                    for earlier in 0..<index where headers[earlier].name == header.name { duplicate = true }
                }
            }
        }
    }

    private struct Verdict {
        var status: Int
        var reason: APNsReason?
        var timestamp: Int64?
        var fault: String?

        static let ok = Verdict(status: 200)
        static func reject(_ reason: APNsReason) -> Verdict { Verdict(status: reason.httpStatus ?? 400, reason: reason) }
    }

    /// Answers one device-push request as APNs would, with the faults in force.
    func handlePush(_ request: HTTP2ServerRequest, _ responder: HTTP2Responder, environment: APNsEnvironment) {
        let key = ConnectionState.key(environment: environment, connectionID: request.connection.id)
        let (connection, box, isNew, purge, registryInUse) = shared.withLock { shared in
            if let existing = shared.connections[key] {
                return (existing, shared.box, false, false, shared.registryInUse)
            }
            let created = ConnectionState(
                key: key, connection: request.connection, environment: environment, limit: shared.faults.maxConcurrentStreams)
            shared.connections[key] = created
            shared.newConnectionsSincePurge += 1
            return (created, shared.box, true, shared.newConnectionsSincePurge >= 256, shared.registryInUse)
        }
        let faults = box.faults
        if purge { purgeClosedConnections() }
        if isNew {
            // The first request is how the simulator meets a connection: certificate connections are
            // trusted at once; timers start now.
            if connection.certificate != nil { connection.trust() }
            if !box.isQuiet {
                let recorder = self.recorder
                connection.startTimers(faults) { recorder.count("goaway") }
            }
        }
        let now = clock.nowMilliseconds()
        var record = APNsSimulatorRecord(
            environment: environment, connectionID: request.connection.id, streamID: request.streamID,
            receivedAtMilliseconds: now, method: request.method, path: request.path, headers: request.headers,
            body: request.body, certificateSubject: connection.certificate?.subject)

        // Stream-count faults come first: they model the network, not APNs's checks.
        let (streams, unanswered, delay, apnsIDSeed, aboveGoAway) = connection.fields.withLock { fields in
            if let last = fields.goAwayLastStreamID, request.streamID > last {
                return (fields.streams, false, Int64(0), UInt64(0), true)
            }
            fields.maxStreamID = max(fields.maxStreamID, request.streamID)
            fields.streams += 1
            var delay: Int64 = 0
            if let latency = faults.latency, fields.rng.unit() < latency.share {
                delay = Self.sample(latency, &fields.rng)
            }
            let unanswered = faults.unansweredShare > 0 && fields.rng.unit() < faults.unansweredShare
            return (fields.streams, unanswered, delay, fields.rng.next(), false)
        }
        if aboveGoAway {
            // Above the last-stream-id of the GOAWAY sent: not processed, as the client assumes.
            record.fault = "refused"
            recorder.append(record, counter: "refused")
            return
        }
        if faults.dropAfterStreams > 0 && streams >= faults.dropAfterStreams {
            record.fault = "dropped"
            recorder.append(record, counter: "dropped")
            request.connection.drop()
            return
        }
        if unanswered {
            record.fault = "unanswered"
            recorder.append(record, counter: "unanswered")
            return
        }
        if let hung = faults.hungTokens, request.path.hasPrefix("/3/device/"),
           hung.isHung(String(request.path.dropFirst("/3/device/".utf8.count)).lowercased()) {
            // A hung device token: never answered; the stream stays open until the client resets it.
            record.fault = "hung"
            recorder.append(record, counter: "hung")
            return
        }

        let fields = Fields(request.headers)
        if SimulatorChannels.handles(request.path) {
            let (response, counter) = answerChannelRequest(
                request, fields, connection, environment: environment, now: now, box: box, seed: apnsIDSeed, record: &record)
            recorder.append(record, counter: counter)
            if delay > 0 {
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(delay))) { responder.respond(response) }
            } else {
                responder.respond(response)
            }
            return
        }
        var verdict = check(request, fields, connection, environment: environment, now: now, registryInUse: registryInUse, faults: faults)
        if verdict.status == 200, let injected = injectedReason(box, connection) {
            verdict = .reject(injected)
            verdict.fault = "injected"
        }
        if verdict.status == 200 { connection.trust() }

        // The answer: 200 needs no JSON at all.
        var rng = SplitMix64(seed: apnsIDSeed)
        let apnsID: String
        if let sent = fields.apnsID, APNsIDSyntax.isValid(sent) { apnsID = sent.lowercased() } else { apnsID = rng.uuidString() }
        var headers = [HTTP2Header("apns-id", apnsID), HTTP2Header("date", HTTPDate.format(secondsSinceEpoch: clock.nowSeconds()))]
        if environment == .sandbox { headers.append(HTTP2Header("apns-unique-id", rng.uuidString())) }
        let response: HTTP2ServerResponse
        let counter: String
        if verdict.status == 200 {
            response = HTTP2ServerResponse(status: 200, headers: headers)
            counter = "200"
        } else {
            headers.append(HTTP2Header("content-type", "application/json"))
            let reason = verdict.reason ?? .internalServerError
            response = HTTP2ServerResponse(
                status: verdict.status, headers: headers,
                body: APNsErrorResponse(reason: reason, timestampMilliseconds: verdict.timestamp).body)
            counter = "\(verdict.status) \(reason.rawValue)"
        }
        record.status = verdict.status
        record.reason = verdict.reason?.rawValue
        record.timestampMilliseconds = verdict.timestamp
        record.apnsID = apnsID
        record.fault = verdict.fault
        record.delayMilliseconds = delay
        let holds = faults.hold.map { hold in
            request.path.hasPrefix("/3/device/") && hold.tokens.contains(String(request.path.dropFirst("/3/device/".utf8.count)).lowercased())
        } ?? false
        if holds {
            record.fault = record.fault ?? "held"
            record.delayMilliseconds = 0
        }
        recorder.append(record, counter: counter)

        if holds {
            // Kept until released (admin API or `APNsSimulator.releaseHeld`); the latency fault does not apply.
            recorder.count("held")
            let answer = HeldAnswer(
                token: String(request.path.dropFirst("/3/device/".utf8.count)).lowercased(), environment: environment,
                connectionID: request.connection.id, streamID: request.streamID, status: verdict.status,
                responder: responder, response: response)
            held.withLock { $0.append(answer) }
        } else if delay > 0 {
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(delay))) {
                responder.respond(response)
            }
        } else {
            responder.respond(response)
        }
        if let goAway = faults.goAway, goAway.afterStreams > 0, streams >= goAway.afterStreams {
            if connection.goAway(lastStreamID: request.streamID, reason: goAway.reason, errorCode: goAway.errorCode) {
                recorder.count("goaway")
            }
        }
    }

    private static func sample(_ latency: APNsSimulatorFaults.Latency, _ rng: inout SplitMix64) -> Int64 {
        let minimum = latency.minimum.wholeMilliseconds
        let maximum = latency.maximum.wholeMilliseconds
        switch latency.distribution {
        case .uniform:
            return maximum > minimum ? minimum + Int64(rng.unit() * Double(maximum - minimum + 1)) : minimum
        case .exponential:
            let value = minimum + Int64(-log(1 - rng.unit()) * Double(latency.mean.wholeMilliseconds))
            return maximum > 0 ? min(value, maximum) : value
        }
    }

    /// Apple's checks (docs/apns-protocol.md §2–§5) in this order: DuplicateHeaders, MethodNotAllowed,
    /// BadPath, MissingDeviceToken, authentication (MissingProviderToken, InvalidProviderToken,
    /// BadEnvironmentKeyIdInToken, UnrelatedKeyIdInToken, ExpiredProviderToken,
    /// TooManyProviderTokenUpdates), BadDeviceToken, InvalidPushType, MissingTopic, BadTopic,
    /// TopicDisallowed, BadPriority, BadExpirationDate, BadMessageId, BadCollapseId, PayloadEmpty,
    /// PayloadTooLarge, then the registry (BadDeviceToken for the other environment,
    /// DeviceTokenNotForTopic, Unregistered/ExpiredToken) and the per-token rate limit.
    private func check(
        _ request: HTTP2ServerRequest, _ fields: Fields, _ connection: ConnectionState, environment: APNsEnvironment,
        now: Int64, registryInUse: Bool, faults: APNsSimulatorFaults
    ) -> Verdict {
        if fields.duplicate { return .reject(.duplicateHeaders) }
        guard request.method == "POST" else { return .reject(.methodNotAllowed) }
        let prefix = "/3/device/"
        guard request.path.hasPrefix(prefix) else { return .reject(.badPath) }
        let tokenText = request.path.dropFirst(prefix.utf8.count)
        guard !tokenText.isEmpty else { return .reject(.missingDeviceToken) }
        guard !tokenText.utf8.contains(UInt8(ascii: "/")) else { return .reject(.badPath) }  // not Foundation's contains: hot path

        if connection.certificate == nil {
            if let failure = checkProviderToken(fields.authorization, connection, environment: environment, now: now,
                                                 expiredThroughIat: faults.providerTokensExpiredThroughIat) {
                return .reject(failure)
            }
        }
        // Lowercase hex of an accepted length is the common case: no DeviceToken (three allocations).
        let tokenHex: String
        if Self.isCanonicalHexToken(tokenText) {
            tokenHex = registryInUse ? String(tokenText) : ""
        } else {
            guard let token = try? DeviceToken(validating: String(tokenText)) else { return .reject(.badDeviceToken) }
            tokenHex = token.hex
        }

        // Push type: absent means the one the topic's suffix implies (alert for a bare bundle ID).
        var pushType: APNsPushType?
        if let value = fields.pushType {
            guard let parsed = APNsPushType(rawValue: value) else { return .reject(.invalidPushType) }
            pushType = parsed
        }
        guard let topic = fields.topic ?? connection.certificate?.defaultTopic else { return .reject(.missingTopic) }
        guard Self.isWellFormedTopic(topic) else { return .reject(.badTopic) }
        let type = pushType ?? Self.impliedPushType(topic)
        guard Self.topic(topic, suits: type) else { return .reject(.topicDisallowed) }
        if let certificate = connection.certificate {
            guard certificate.topics.contains(topic), !type.requiresTokenAuthentication else { return .reject(.topicDisallowed) }
        } else if type.requiresCertificateAuthentication {
            return .reject(.topicDisallowed)
        } else if topicScopesInUse.load(ordering: .relaxed),
                  let scope = connection.fields.withLock({ $0.boundTopics }), !scope.contains(Self.bundleID(of: topic, type)) {
            return .reject(.topicDisallowed)
        }

        var priority = 10
        if let value = fields.priority {
            guard let number = Int(value), number == 10 || number == 5 || number == 1 else { return .reject(.badPriority) }
            priority = number
        }
        // Background pushes must say 5 (docs/apns-protocol.md §2: "Always 5. Using 10 is an error";
        // the default is 10, so omitting the header is the same error).
        if type == .background && priority != 5 { return .reject(.badPriority) }
        if (try? APNsExpiration(headerValue: fields.expiration)) == nil { return .reject(.badExpirationDate) }
        if let apnsID = fields.apnsID, !APNsIDSyntax.isValid(apnsID) { return .reject(.badMessageId) }
        if let collapseID = fields.collapseID, collapseID.utf8.count > 64 { return .reject(.badCollapseId) }
        if request.body.isEmpty { return .reject(.payloadEmpty) }
        if request.body.count > type.maximumPayloadBytes { return .reject(.payloadTooLarge) }

        guard registryInUse else { return .ok }
        let bundleID = Self.bundleID(of: topic, type)
        return shared.withLock { shared -> Verdict in
            if let registration = shared.registrations[tokenHex] {
                if registration.environment != environment { return .reject(.badDeviceToken) }
                if let expected = registration.bundleID, expected != bundleID { return .reject(.deviceTokenNotForTopic) }
            }
            if let invalidation = shared.invalidations[tokenHex], invalidation.bundleID == nil || invalidation.bundleID == bundleID {
                var verdict = Verdict.reject(invalidation.reason)
                verdict.timestamp = invalidation.timestampMilliseconds
                return verdict
            }
            if let limit = shared.faults.tokenRateLimit {
                var window = shared.rateWindows[tokenHex] ?? (start: now, count: 0)
                if now - window.start >= limit.window.wholeMilliseconds { window = (start: now, count: 0) }
                window.count += 1
                shared.rateWindows[tokenHex] = window
                if window.count > limit.maxPushes {
                    var verdict = Verdict.reject(.tooManyRequests)
                    verdict.fault = "injected"
                    return verdict
                }
            }
            return .ok
        }
    }

    /// Token authentication (docs/apns-protocol.md §4). Returns the failure, or nil when the token is good.
    ///
    /// The JWT accepted on a connection is cached there, so a request repeating it costs a string
    /// comparison, not an ECDSA verification. A different JWT is verified; it replaces the
    /// connection's JWT unless the current one was installed less than 20 minutes ago and has not
    /// expired (429 `TooManyProviderTokenUpdates`). The first accepted JWT binds its Key ID to the
    /// connection (`UnrelatedKeyIdInToken` for another).
    func checkProviderToken(
        _ authorization: String?, _ connection: ConnectionState, environment: APNsEnvironment, now: Int64,
        expiredThroughIat: Int64? = nil
    ) -> APNsReason? {
        func expired(_ verified: APNsVerifiedJWT) -> Bool {
            verified.age(atSeconds: now / 1000) > 3600 || expiredThroughIat.map { verified.issuedAt <= $0 } == true
        }
        guard let authorization, !authorization.isEmpty else { return .missingProviderToken }
        guard Self.hasBearerPrefix(authorization) else { return .invalidProviderToken }
        let jwt = authorization.dropFirst(7)
        let nowSeconds = now / 1000
        let cached: APNsReason?? = connection.fields.withLock { fields in
            guard let current = fields.jwt, current == jwt, let verified = fields.verified else { return .none }
            return .some(expired(verified) ? .expiredProviderToken : nil)
        }
        if let cached { return cached }

        guard let verified = try? verifier.verify(String(jwt)) else { return .invalidProviderToken }
        guard let key = keys[verified.keyID], key.teamID == verified.issuer else { return .invalidProviderToken }
        if let restricted = key.environment, restricted != environment { return .badEnvironmentKeyIdInToken }
        let scope = topicScopesInUse.load(ordering: .relaxed) ? shared.withLock { $0.keyTopics[verified.keyID] } : nil
        return connection.fields.withLock { fields -> APNsReason? in
            if let bound = fields.boundKeyID, bound != verified.keyID { return .unrelatedKeyIdInToken }
            if expired(verified) { return .expiredProviderToken }
            if let current = fields.verified,
               now - fields.installedAtMilliseconds < 20 * 60 * 1000,
               current.age(atSeconds: nowSeconds) <= 3600 {
                return .tooManyProviderTokenUpdates
            }
            fields.jwt = jwt
            fields.verified = verified
            fields.installedAtMilliseconds = now
            if fields.boundKeyID == nil { fields.boundTopics = scope }  // the first push binds the key's topics
            fields.boundKeyID = verified.keyID
            return nil
        }
    }

    /// The bundle ID of `topic`: without the suffix `type` implies.
    static func bundleID(of topic: String, _ type: APNsPushType) -> String {
        type.topicSuffix.isEmpty ? topic : String(topic.dropLast(type.topicSuffix.utf8.count))
    }

    /// Sets the bundle IDs of a topic-specific key (nil: every topic of its team). Connections that
    /// already pushed keep the list they bound; new connections bind this one (Apple: a newly added
    /// bundle ID needs new connections; docs/apns-protocol.md §4).
    /// - Throws: `APNsSimulatorError` `.invalidKey` when no trusted key has `keyID`.
    func setTopics(_ topics: [String]?, forKey keyID: String) throws(APNsSimulatorError) {
        guard keys[keyID] != nil else { throw APNsSimulatorError(.invalidKey, "no trusted key has Key ID \(keyID)") }
        shared.withLock { $0.keyTopics[keyID] = topics.map(Set.init) }
        if topics != nil { topicScopesInUse.store(true, ordering: .relaxed) }
    }

    /// Lowercase hex, even length, 64…512 digits: what `DeviceToken` would keep unchanged.
    static func isCanonicalHexToken(_ text: Substring) -> Bool {
        var count = 0
        for byte in text.utf8 {
            guard (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) else { return false }
            count += 1
        }
        return count % 2 == 0 && count >= DeviceToken.minimumHexLength && count <= DeviceToken.maximumHexLength
    }

    private static let bearerPrefix: [UInt8] = Array("bearer ".utf8)

    /// `bearer ` in any case, followed by at least one byte (no allocation: this runs per request).
    static func hasBearerPrefix(_ authorization: String) -> Bool {
        let prefix = bearerPrefix
        var index = 0
        for byte in authorization.utf8 {
            if index == prefix.count { return true }
            if byte | (byte >= 0x41 && byte <= 0x5A ? 0x20 : 0) != prefix[index] { return false }
            index += 1
        }
        return false
    }

    /// A topic is a dotted name of letters, digits, `-` and `_` (a bundle ID plus suffix); anything
    /// else (empty, spaces, `/`…) is `BadTopic`.
    static func isWellFormedTopic(_ topic: String) -> Bool {
        guard !topic.isEmpty, topic.utf8.count <= 255 else { return false }
        for byte in topic.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"):
                continue
            default:
                return false
            }
        }
        return topic.first != "." && topic.last != "."
    }

    /// The push type a topic's suffix implies when `apns-push-type` is absent.
    static func impliedPushType(_ topic: String) -> APNsPushType {
        suffixedTypes.first { topic.hasSuffix($0.topicSuffix) && topic.utf8.count > $0.topicSuffix.utf8.count } ?? .alert
    }

    /// Push types with a topic suffix, longest suffix first.
    private static let suffixedTypes = APNsPushType.allCases.filter { !$0.topicSuffix.isEmpty }
        .sorted { $0.topicSuffix.utf8.count > $1.topicSuffix.utf8.count }

    /// Whether `topic` carries the suffix `type` needs (docs/apns-protocol.md §2 "Push types, topics and
    /// priority"): the type's suffix, or for `alert`/`background` no push-type suffix at all. `mdm`
    /// topics are the certificate's UID and take any form.
    static func topic(_ topic: String, suits type: APNsPushType) -> Bool {
        if type == .mdm { return true }
        let suffix = type.topicSuffix
        if !suffix.isEmpty { return topic.hasSuffix(suffix) && topic.utf8.count > suffix.utf8.count }
        return impliedPushType(topic) == .alert
    }
}

/// An answer the `hold` fault keeps back until it is released.
struct HeldAnswer: Sendable {
    /// The device token of the request, lowercase hex.
    let token: String
    let environment: APNsEnvironment
    let connectionID: UInt64
    let streamID: Int32
    /// The HTTP status the answer carries.
    let status: Int
    let responder: HTTP2Responder
    let response: HTTP2ServerResponse
}
