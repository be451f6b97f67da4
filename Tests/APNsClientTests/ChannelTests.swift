import APNs
import APNsSimulator
import Foundation
import PushDomain
import ServiceCore
import Testing

/// The broadcast-channel APIs over TLS against the simulator (docs/apns-protocol.md §8): channel
/// management (create, read, list, delete, Apple's quota), broadcasts accepted with `apns-unique-id`,
/// every refusal the simulator models reaching the caller with Apple's reason, management retries
/// and a broadcast sent at most once.
@Suite(.serialized, .timeLimit(.minutes(2))) struct ChannelTests {
    static let other = "com.example.other"

    /// The harness's client configuration with the channel and broadcast endpoints on the simulator.
    func configuration(_ harness: Harness) -> APNsClient.Configuration {
        var configuration = harness.configuration()
        configuration.channelsProduction = .init(host: "127.0.0.1", port: harness.simulator.productionPort)
        configuration.channelsSandbox = .init(host: "127.0.0.1", port: harness.simulator.sandboxPort)
        configuration.broadcastProduction = .init(host: "127.0.0.1", port: harness.simulator.productionPort)
        configuration.broadcastSandbox = .init(host: "127.0.0.1", port: harness.simulator.sandboxPort)
        return configuration
    }

    func payload(bytes: Int? = nil) -> [UInt8] {
        let base = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}"#
        guard let bytes else { return Array((base + "}").utf8) }
        let padding = String(repeating: "x", count: max(0, bytes - base.utf8.count - 8))
        return Array((base + #","p":""# + padding + #""}"#).utf8)
    }

    func created(_ client: APNsClient, policy: APNsMessageStoragePolicy, bundleID: String = Credentials.app) async throws -> String {
        let answer = try await client.createChannel(bundleID: bundleID, environment: .production, policy: policy)
        #expect(answer.status == 201 && answer.reason == nil)
        return try #require(answer.channelID)
    }

    @Test func createReadListDelete() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient(configuration(harness))
            harness.shutdownAtEnd(client)
            let created = try await client.createChannel(bundleID: Credentials.app, environment: .production, policy: .mostRecentMessageStored)
            #expect(created.status == 201 && created.isSuccess && created.attempts == 1)
            let id = try #require(created.channelID)
            #expect(!id.isEmpty && id.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "+/=-_".contains($0)) }, "base64")
            #expect(created.apnsRequestID?.count == 36)

            let read = try await client.readChannel(bundleID: Credentials.app, environment: .production, channelID: id)
            #expect(read.status == 200 && read.messageStoragePolicy == .mostRecentMessageStored && read.channelID == id)
            let second = try await self.created(client, policy: .noMessageStored)
            #expect(try await client.readChannel(bundleID: Credentials.app, environment: .production, channelID: second).messageStoragePolicy == .noMessageStored)

            let listed = try await client.listChannels(bundleID: Credentials.app, environment: .production)
            #expect(listed.status == 200 && Set(listed.channelIDs) == [id, second])
            // A channel belongs to one environment.
            #expect(try await client.listChannels(bundleID: Credentials.app, environment: .sandbox).channelIDs.isEmpty)

            let deleted = try await client.deleteChannel(bundleID: Credentials.app, environment: .production, channelID: id)
            #expect(deleted.status == 204 && deleted.isSuccess)
            let gone = try await client.readChannel(bundleID: Credentials.app, environment: .production, channelID: id)
            #expect(gone.status == 400 && gone.reason == .channelNotRegistered && !gone.isSuccess)
            let again = try await client.deleteChannel(bundleID: Credentials.app, environment: .production, channelID: id)
            #expect(again.status == 400 && again.reason == .channelNotRegistered && again.attempts == 1)
            #expect(try await client.listChannels(bundleID: Credentials.app, environment: .production).channelIDs == [second])

            let paths = harness.simulator.receivedRequests().map { "\($0.method) \($0.path)" }
            #expect(paths.contains("POST /1/apps/com.example.app/channels"))
            #expect(paths.contains("GET /1/apps/com.example.app/all-channels"))
            #expect(paths.contains("DELETE /1/apps/com.example.app/channels"))
        }
    }

    @Test func appleQuotaIsCannotCreateChannelConfig() async throws {
        try await withSimulator(configure: { $0.channelLimit = 2 }) { harness in
            let client = try harness.tokenClient(configuration(harness))
            harness.shutdownAtEnd(client)
            _ = try await created(client, policy: .noMessageStored)
            _ = try await created(client, policy: .noMessageStored)
            let refused = try await client.createChannel(bundleID: Credentials.app, environment: .production, policy: .noMessageStored)
            #expect(refused.status == 400 && refused.reason == .cannotCreateChannelConfig && refused.channelID == nil)
            #expect(refused.attempts == 1, "a 400 is final")
            // The quota is per app and environment.
            #expect(try await client.createChannel(bundleID: Credentials.app, environment: .sandbox, policy: .noMessageStored).status == 201)
        }
    }

    @Test func broadcastAcceptedWithUniqueIDReachesEverySubscriber() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient(configuration(harness))
            harness.shutdownAtEnd(client)
            let stored = try await created(client, policy: .mostRecentMessageStored)
            let live = try await created(client, policy: .noMessageStored)
            try harness.simulator.setChannelSubscribers(7, channelID: stored)
            try harness.simulator.setChannelSubscribers(3, channelID: live)
            let requestID = APNsID.random()
            let expiration = APNsExpiration.at(secondsSinceEpoch: harness.clock.nowSeconds() + 3_600)
            let answer = try await client.broadcast(
                APNsBroadcastRequest(bundleID: Credentials.app, channelID: stored, priority: .consideringDevicePower, expiration: expiration,
                                     apnsRequestID: requestID, payload: payload()),
                environment: .production)
            #expect(answer.status == 200 && answer.reason == nil && answer.attempts == 1)
            #expect(answer.apnsRequestID == requestID.uuidString)
            #expect(try #require(answer.apnsUniqueID).count == 36)
            #expect(answer.channelID == stored)
            // A No-Message-Stored channel with expiration 0 and a payload of exactly 5,120 bytes.
            let full = payload(bytes: 5_120)
            #expect(full.count == APNsBroadcastRequest.maximumPayloadBytes)
            let second = try await client.broadcast(
                APNsBroadcastRequest(bundleID: Credentials.app, channelID: live, priority: .prioritizingDevicePower, payload: full),
                environment: .production)
            #expect(second.status == 200)
            #expect(harness.simulator.counters()["broadcast_reached"] == 10)
            #expect(harness.simulator.counters()["broadcast 200"] == 2)
            let sent = try #require(harness.simulator.receivedRequests().first { $0.path == "/4/broadcasts/apps/com.example.app" })
            #expect(sent.header("apns-push-type") == "liveactivity" && sent.header("apns-channel-id") == stored)
            #expect(sent.header("apns-priority") == "5" && sent.header("apns-expiration") == expiration.headerValue)
            #expect(sent.header("apns-request-id") == requestID.uuidString && sent.header("authorization")?.hasPrefix("bearer ") == true)
        }
    }

    @Test func everyBroadcastRefusalReachesTheCallerWithApplesReason() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient(configuration(harness))
            harness.shutdownAtEnd(client)
            let live = try await created(client, policy: .noMessageStored)
            let stored = try await created(client, policy: .mostRecentMessageStored)
            _ = try await created(client, policy: .noMessageStored, bundleID: Self.other)
            harness.simulator.setBroadcastEnabled(false, bundleID: Self.other)
            let later = APNsExpiration.at(secondsSinceEpoch: harness.clock.nowSeconds() + 3_600)
            func request(_ channelID: String, bundleID: String = Credentials.app, pushType: APNsPushType? = .liveactivity,
                         priority: APNsPriority = .immediately, expiration: APNsExpiration = .immediately,
                         payload: [UInt8]? = nil) -> APNsBroadcastRequest {
                APNsBroadcastRequest(bundleID: bundleID, channelID: channelID, pushType: pushType, priority: priority, expiration: expiration,
                                     payload: payload ?? self.payload())
            }
            let cases: [(String, APNsBroadcastRequest, Int, APNsReason)] = [
                ("no channel id", request(""), 400, .missingChannelId),
                ("not base64", request("not*base64!"), 400, .badChannelId),
                ("unknown channel", request("AAAAAAAAAAAAAAAAAAAAAA=="), 400, .channelNotRegistered),
                ("no push type", request(live, pushType: nil), 400, .missingPushType),
                ("alert push type", request(live, pushType: .alert), 400, .invalidPushType),
                ("priority 7", request(live, priority: APNsPriority(rawValue: 7)), 400, .badPriority),
                ("a time on No-Message-Stored", request(live, expiration: later), 400, .badExpirationDate),
                ("no expiration", request(stored, expiration: .omitted), 400, .badExpirationDate),
                ("empty payload", request(live, payload: []), 400, .payloadEmpty),
                ("5,121 bytes", request(live, payload: payload(bytes: 5_121)), 413, .payloadTooLarge),
                ("broadcast off for the app", request(live, bundleID: Self.other), 400, .featureNotEnabled),
                ("a push-type suffix", request(live, bundleID: Credentials.app + ".push-type.liveactivity"), 400, .topicDisallowed),
            ]
            for (name, broadcast, status, reason) in cases {
                let before = harness.simulator.receivedRequests().count
                let answer = try await client.broadcast(broadcast, environment: .production)
                #expect(answer.status == status && answer.reason == reason, "\(name): \(answer.status) \(answer.reason?.rawValue ?? "-")")
                #expect(answer.attempts == 1 && !answer.isSuccess, "\(name)")
                #expect(harness.simulator.receivedRequests().count == before + 1, "\(name): sent once")
            }
            #expect(harness.simulator.counters()["broadcast 200"] == nil)
        }
    }

    @Test func everyChannelManagementRefusalReachesTheCallerWithApplesReason() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient(configuration(harness))
            harness.shutdownAtEnd(client)
            harness.simulator.setBroadcastEnabled(false, bundleID: Self.other)
            let off = try await client.createChannel(bundleID: Self.other, environment: .production, policy: .noMessageStored)
            #expect(off.status == 400 && off.reason == .featureNotEnabled)
            let missing = try await client.readChannel(bundleID: Credentials.app, environment: .production, channelID: "")
            #expect(missing.status == 400 && missing.reason == .missingChannelId)
            let bad = try await client.deleteChannel(bundleID: Credentials.app, environment: .production, channelID: "%%%")
            #expect(bad.status == 400 && bad.reason == .badChannelId)
            let suffixed = try await client.listChannels(bundleID: Credentials.app + ".push-type.liveactivity", environment: .production)
            #expect(suffixed.status == 400 && suffixed.reason == .topicDisallowed)
            for answer in [off, missing, bad, suffixed] { #expect(answer.attempts == 1) }
        }
    }

    @Test func managementRetries503UntilTheDeadlineButABroadcastIsNeverRepeated() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient(configuration(harness))
            harness.shutdownAtEnd(client)
            let id = try await created(client, policy: .noMessageStored)
            var faults = APNsSimulatorFaults()
            faults.statusShares = [503: 1]
            harness.simulator.setFaults(faults)
            let waiter = ClockAdvancingWaiter(clock: harness.clock)
            let read = try await client.readChannel(bundleID: Credentials.app, environment: .production, channelID: id,
                                                    options: harness.options(waiter, horizon: .milliseconds(200)))
            #expect(read.status == 503 && read.reason == .serviceUnavailable)
            #expect(read.attempts > 1 && read.attempts == waiter.waits.count + 1, "retried with backoff until the deadline")
            #expect(waiter.waits.allSatisfy { $0.reason == .serverError(status: 503) })

            let before = harness.simulator.receivedRequests().count
            let broadcast = try await client.broadcast(
                APNsBroadcastRequest(bundleID: Credentials.app, channelID: id, payload: payload()), environment: .production,
                options: harness.options(waiter, horizon: .seconds(10)))
            #expect(broadcast.status == 503 && broadcast.attempts == 1)
            #expect(harness.simulator.receivedRequests().count == before + 1, "a broadcast answered 503 is not sent again")

            harness.simulator.setFaults(APNsSimulatorFaults())
            #expect(try await client.readChannel(bundleID: Credentials.app, environment: .production, channelID: id).status == 200)
        }
    }

    @Test func aBroadcastWhoseAnswerIsLostIsUnconfirmedAndNotSentAgain() async throws {
        try await withSimulator { harness in
            var configuration = configuration(harness)
            configuration.requestTimeout = .milliseconds(300)
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            let id = try await created(client, policy: .noMessageStored)
            var faults = APNsSimulatorFaults()
            faults.unansweredShare = 1
            harness.simulator.setFaults(faults)
            let before = harness.simulator.receivedRequests().count
            let error = await #expect(throws: APNsError.self) {
                try await client.broadcast(APNsBroadcastRequest(bundleID: Credentials.app, channelID: id, payload: payload()), environment: .production)
            }
            #expect(error?.code == .unconfirmed && error?.attempts == 1)
            #expect(harness.simulator.receivedRequests().count == before + 1)
            #expect(harness.simulator.counters()["unanswered"] == 1)

            // A read whose answer is lost is repeated until the deadline.
            let waiter = ClockAdvancingWaiter(clock: harness.clock)
            let readError = await #expect(throws: APNsError.self) {
                try await client.readChannel(bundleID: Credentials.app, environment: .production, channelID: id,
                                             options: harness.options(waiter, horizon: .milliseconds(100)))
            }
            #expect(readError?.code == .retryHorizonExceeded && (readError?.attempts ?? 0) > 1)
        }
    }

    /// A channel request refused with 403 `ExpiredProviderToken` is answered after one provider-token
    /// renewal (``APNsChannelRetry``: a new JWT, retried once): the second send carries a later `iat`
    /// on a new connection, and the answer returned is Apple's second, with attempts 2.
    @Test func aChannelRequestIsAnsweredAfterAProviderTokenRenewal() async throws {
        try await withSimulator { harness in
            let registry = MetricsRegistry()
            let tokens = try harness.credentials.tokens(clock: harness.clock, metrics: registry)
            let client = APNsClient(
                configuration: configuration(harness), tokens: tokens, logger: Logger(label: "apns.test", logLevel: .critical), metrics: registry)
            harness.shutdownAtEnd(client)
            let id = try await created(client, policy: .noMessageStored)
            let first = try #require(tokens.currentIssuedAt)
            // APNs now refuses that JWT as expired (as it would with our clock behind its own).
            var faults = APNsSimulatorFaults()
            faults.providerTokensExpiredThroughIat = first
            harness.simulator.setFaults(faults)
            let before = harness.simulator.receivedRequests().count

            let read = try await client.readChannel(bundleID: Credentials.app, environment: .production, channelID: id)
            #expect(read.status == 200 && read.reason == nil && read.messageStoragePolicy == .noMessageStored && read.channelID == id)
            #expect(read.attempts == 2)
            let sent = Array(harness.simulator.receivedRequests().dropFirst(before))
            #expect(sent.map(\.status) == [403, 200])
            #expect(sent.map(\.path) == ["/1/apps/\(Credentials.app)/channels", "/1/apps/\(Credentials.app)/channels"])
            let iats = sent.compactMap { $0.jwt?.claims["iat"]?.integerValue }
            #expect(iats.count == 2 && iats[0] == first && iats[1] > first, "the retry carries a new iat: \(iats)")
            if sent.count == 2 { #expect(sent[0].connectionID != sent[1].connectionID, "on a new connection") }
            #expect(tokens.mintCount == 2, "one renewal")
            #expect(client.metrics["jwt_renewals"] == 1)
            #expect(registry.value("push_apns_jwt_mints_total") == 2)
        }
    }
}
