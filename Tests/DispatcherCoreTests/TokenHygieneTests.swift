import Foundation
import Kafka
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

extension FeedbackEvent {
    /// The event's `TokenInvalidated` (empty for other events).
    var invalidatedBody: TokenInvalidated {
        if case .tokenInvalidated(let body)? = event { return body }
        return TokenInvalidated()
    }
}

/// The token-hygiene cutoffs without I/O (docs/token-hygiene.md).
struct TokenHygieneDecisionTests {
    @Test func cutoffsAreStrictAndOffUntilSet() {
        var settings = TokenHygieneSettings()
        #expect(settings.isEnabled && settings.campaignRetentionDays == 30)
        let now: Int64 = 1_800_000_000_000
        var cutoffs = settings.cutoffs(nowMs: now)
        #expect(cutoffs == TokenHygieneCutoffs(deleteCampaignsBeforeMs: now - 30 * 86_400_000))
        #expect(!cutoffs.touchesTokens && !cutoffs.isStale(registeredAtMs: 0) && !cutoffs.isExpiredInactive(inactiveAtMs: 0))
        settings.campaignRetentionDays = nil
        #expect(!settings.isEnabled)

        settings.staleAfterDays = 90
        settings.deleteInactiveAfterDays = 7
        cutoffs = settings.cutoffs(nowMs: now)
        let stale = now - 90 * 86_400_000, inactive = now - 7 * 86_400_000
        #expect(cutoffs.touchesTokens && cutoffs.staleBeforeMs == stale && cutoffs.deleteInactiveBeforeMs == inactive)
        #expect(cutoffs.isStale(registeredAtMs: stale - 1) && !cutoffs.isStale(registeredAtMs: stale) && !cutoffs.isStale(registeredAtMs: stale + 1))
        #expect(cutoffs.isExpiredInactive(inactiveAtMs: inactive - 1) && !cutoffs.isExpiredInactive(inactiveAtMs: inactive))
        #expect(!cutoffs.isExpiredCampaign(completedAtMs: 0))
    }
}

/// The token-hygiene job on a real PostgreSQL and librdkafka's Kafka-protocol broker: exactly the
/// rows past their cutoffs change, every stale token's `TokenInvalidated` reaches the feedback topic
/// before its row changes, and only the holder of the job's fenced lease writes anything.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(3)))
struct TokenHygieneTests {
    static let now: Int64 = 1_800_000_000_000
    static let day: Int64 = 86_400_000
    static let staleCut = now - 90 * day
    static let inactiveCut = now - 30 * day
    static let campaignCut = now - 30 * day

    /// PostgreSQL (this suite's database), a one-broker Kafka cluster and a feedback topic of its own.
    final class Harness: Sendable {
        let pool: PostgresPool
        let tokens: TokenStore
        let store: TokenHygieneStore
        let cluster: KafkaMockCluster
        let producer: KafkaProducer
        let feedback: FeedbackPublisher
        let topic: String

        init(messageTimeout: Duration = .seconds(30)) async throws {
            pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 4))
            try await pool.start()
            tokens = TokenStore(pool: pool)
            try await tokens.migrate()
            _ = try await pool.execute("DELETE FROM device_tokens")
            _ = try await pool.execute("DELETE FROM campaigns")
            _ = try await pool.execute("UPDATE job_leases SET lease_owner = NULL, lease_expires_at = NULL, cursor = NULL, last_finished_at = NULL")
            store = TokenHygieneStore(pool: pool)
            cluster = try KafkaMockCluster(brokers: 1)
            topic = "feedback-\(UUID().uuidString.prefix(8))"
            try cluster.createTopic(topic, partitions: 1)
            var configuration = KafkaProducerConfiguration(bootstrapServers: [cluster.bootstrapServers])
            configuration.messageTimeout = messageTimeout
            producer = try KafkaProducer(configuration: configuration)
            var topics = DispatcherConfiguration.Topics()
            topics.feedback = topic
            feedback = FeedbackPublisher(producer: producer, topics: topics, clock: ManualWallClock(milliseconds: TokenHygieneTests.now))
        }

        func runner(_ settings: TokenHygieneSettings, instance: String, lease: Duration = .seconds(30)) -> TokenHygieneRunner {
            TokenHygieneRunner(
                store: store, feedback: feedback, settings: settings, leaseDuration: lease, instanceID: instance,
                clock: ManualWallClock(milliseconds: TokenHygieneTests.now), logger: Logger(label: "test.hygiene"), metrics: MetricsRegistry())
        }

        func close() async {
            await producer.shutdown()
            await pool.close()
        }

        /// Every `TokenInvalidated` on the topic, up to a sentinel record written now (so that the
        /// answer is exact without waiting for silence).
        func invalidations() async throws -> [FeedbackEvent] {
            _ = try await producer.send(topic: topic, key: "sentinel", value: Array("sentinel".utf8))
            var configuration = KafkaConsumerConfiguration(bootstrapServers: [cluster.bootstrapServers], groupID: "g-\(UUID())", topics: [topic])
            configuration.sessionTimeout = .seconds(6)
            let consumer = try KafkaConsumer(configuration: configuration)
            return try await withAsyncCleanup {
                var events: [FeedbackEvent] = []
                let deadline = ContinuousClock.now + .seconds(60)
                while ContinuousClock.now < deadline {
                    let batch = try await withThrowingTaskGroup(of: [KafkaMessage]?.self) { group in
                        group.addTask { await consumer.nextMessages(maxCount: 1_000) }
                        group.addTask {
                            try await Task.sleep(for: .seconds(60))
                            return nil
                        }
                        let first = try await group.next()!
                        group.cancelAll()
                        return first ?? []
                    }
                    for message in batch {
                        if message.key == Array("sentinel".utf8) { return events }
                        let event = try FeedbackEvent(protobufBytes: message.value)
                        if case .tokenInvalidated? = event.event { events.append(event) }
                    }
                }
                throw TestFailure("the sentinel never arrived")
            } cleanup: {
                await consumer.close()
            }
        }
    }

    static func token(_ i: Int) -> String { String(repeating: "0", count: 56) + String(format: "%08x", i) }

    static func insert(_ harness: Harness, _ token: String, bundle: String = "com.example.a", active: Bool, registeredAtMs: Int64?,
                       lastEventAtMs: Int64, inactiveAtMs: Int64? = nil, user: String = "u") async throws {
        _ = try await harness.pool.execute("""
            INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, user_id, installation_id, status,
                                       inactive_reason, inactive_at_ms, last_event_at_ms, registered_at_ms)
            VALUES ($1, $2, 'sandbox', 'standard', $3, 'install-' || $3, $4, $5, $6, $7, $8)
            """,
            [.string(token), .string(bundle), .string(user), .string(active ? "active" : "inactive"),
             active ? nil : .string("unregistered"), inactiveAtMs.map { .int64($0) }, .int64(lastEventAtMs), registeredAtMs.map { .int64($0) }])
    }

    /// Every row: token → (status, inactive_reason, inactive_at_ms, last_event_at_ms).
    static func rows(_ harness: Harness) async throws -> [String: [String]] {
        var result: [String: [String]] = [:]
        for row in try await harness.pool.query("SELECT device_token, status, inactive_reason, inactive_at_ms, last_event_at_ms FROM device_tokens") {
            result[try row.string("device_token") ?? ""] = try ["status", "inactive_reason", "inactive_at_ms", "last_event_at_ms"].map { try row.string($0) ?? "" }
        }
        return result
    }

    static func settings(batch: Int) -> TokenHygieneSettings {
        var settings = TokenHygieneSettings()
        settings.staleAfterDays = 90
        settings.deleteInactiveAfterDays = 30
        settings.campaignRetentionDays = 30
        settings.batchSize = batch
        return settings
    }

    @Test func staleAgeingAndCleanupChangeExactlyTheRowsTheyShouldAndAnnounceEachStaleToken() async throws {
        let harness = try await Harness()
        try await withAsyncCleanup {
            // Tokens in key order; fresh active rows (40...59) spread the others over several pages.
            let staleA = Self.token(1), atCut = Self.token(2), afterCut = Self.token(3), staleB = Self.token(4)
            let freshB = Self.token(5), staleNoRegistration = Self.token(6), oldInactiveA = Self.token(7)
            let inactiveAtCut = Self.token(8), oldInactiveB = Self.token(9), recentInactiveB = Self.token(10)
            let longInactiveRecentlyUnregistered = Self.token(11)
            try await Self.insert(harness, staleA, active: true, registeredAtMs: Self.staleCut - 1, lastEventAtMs: Self.staleCut - 1, user: "ua")
            try await Self.insert(harness, atCut, active: true, registeredAtMs: Self.staleCut, lastEventAtMs: Self.staleCut)
            try await Self.insert(harness, afterCut, active: true, registeredAtMs: Self.staleCut + 1, lastEventAtMs: Self.staleCut + 1)
            try await Self.insert(harness, staleB, bundle: "com.example.b", active: true, registeredAtMs: Self.staleCut - Self.day,
                                  lastEventAtMs: Self.staleCut - Self.day, user: "ub")
            try await Self.insert(harness, freshB, bundle: "com.example.b", active: true, registeredAtMs: Self.now, lastEventAtMs: Self.now)
            try await Self.insert(harness, staleNoRegistration, active: true, registeredAtMs: nil, lastEventAtMs: Self.staleCut - 1_000)
            try await Self.insert(harness, oldInactiveA, active: false, registeredAtMs: 1, lastEventAtMs: 1, inactiveAtMs: Self.inactiveCut - 1)
            try await Self.insert(harness, inactiveAtCut, active: false, registeredAtMs: 1, lastEventAtMs: 1, inactiveAtMs: Self.inactiveCut)
            try await Self.insert(harness, oldInactiveB, bundle: "com.example.b", active: false, registeredAtMs: 1, lastEventAtMs: 1,
                                  inactiveAtMs: Self.inactiveCut - Self.day)
            try await Self.insert(harness, recentInactiveB, bundle: "com.example.b", active: false, registeredAtMs: 1, lastEventAtMs: 1,
                                  inactiveAtMs: Self.now)
            // Inactive and last registered long ago: neither stale (not active) nor old enough to delete.
            try await Self.insert(harness, longInactiveRecentlyUnregistered, active: false, registeredAtMs: 1, lastEventAtMs: Self.now - Self.day,
                                  inactiveAtMs: Self.now - Self.day)
            for i in 40..<60 {
                try await Self.insert(harness, Self.token(i), bundle: i % 2 == 0 ? "com.example.a" : "com.example.b", active: true,
                                      registeredAtMs: Self.now - Self.day, lastEventAtMs: Self.now - Self.day)
            }
            // Campaign rows: finished before the retention (deleted), at it and open ones (kept).
            let campaigns = CampaignStore(pool: harness.pool)
            for (id, status, completedAt) in [("old-completed", "completed", Self.campaignCut - 1), ("old-cancelled", "cancelled", Self.campaignCut - Self.day),
                                              ("at-cut", "completed", Self.campaignCut), ("recent", "completed", Self.now),
                                              ("old-running", "running", Self.campaignCut - Self.day), ("old-accepted", "accepted", Self.campaignCut - Self.day)] {
                var request = CampaignDecisionTests.audienceRequest()
                request.requestID = id
                try await campaigns.create(request, requestedAtMs: 1, nowMs: 1)
                _ = try await harness.pool.execute("UPDATE campaigns SET status = $2, completed_at_ms = $3 WHERE request_id = $1",
                                                   [.string(id), .string(status), .int64(completedAt)])
            }
            let before = try await Self.rows(harness)

            let runner = harness.runner(Self.settings(batch: 3), instance: "replica-a")
            let pass = try #require(try await runner.runOnce())
            #expect(pass.outcome == .completed)
            #expect((pass.deactivatedStale, pass.deletedInactive, pass.deletedCampaigns) == (3, 2, 2))
            #expect(pass.pages == (before.count + 2) / 3)

            // Exactly these rows changed, each as it should.
            let after = try await Self.rows(harness)
            let stale: Set = [staleA, staleB, staleNoRegistration]
            let deleted: Set = [oldInactiveA, oldInactiveB]
            #expect(Set(after.keys) == Set(before.keys).subtracting(deleted))
            for (token, row) in after {
                if stale.contains(token) {
                    #expect(row == ["inactive", "stale", "\(Self.now)", before[token]![3]], "\(token)")
                } else {
                    #expect(row == before[token], "\(token) changed")
                }
            }
            let remaining = try await harness.pool.query("SELECT request_id FROM campaigns ORDER BY request_id").map { try $0.string("request_id") ?? "" }
            #expect(remaining == ["at-cut", "old-accepted", "old-running", "recent"])

            // Each stale token was announced once, with the stale reason and a deterministic id.
            let events = try await harness.invalidations()
            #expect(events.count == 3)
            #expect(Set(events.map(\.invalidatedBody.deviceToken)) == stale)
            for event in events {
                let invalidated = event.invalidatedBody
                #expect(invalidated.outcomeReason == .tokenStale && invalidated.apnsReason.isEmpty && invalidated.environment == .sandbox)
                let registered: Int64 = switch invalidated.deviceToken {
                    case staleA: Self.staleCut - 1
                    case staleB: Self.staleCut - Self.day
                    default: Self.staleCut - 1_000
                }
                #expect(event.eventID == FeedbackEventID.tokenInvalidated(deviceToken: invalidated.deviceToken, apnsTimestampMs: registered, requestID: "token-stale"))
            }
            let a = try #require(events.first { $0.invalidatedBody.deviceToken == staleA }?.invalidatedBody)
            #expect((a.bundleID, a.userID, a.installationID) == ("com.example.a", "ua", "install-ua"))

            // The pass is recorded: the next is not due for an interval, on any replica.
            #expect(try await harness.runner(Self.settings(batch: 3), instance: "replica-b").runOnce() == nil)
            // A new registration makes a stale token active again.
            #expect(try await harness.tokens.apply(TokenStoreTests.registered(staleA, at: Self.now, bundle: "com.example.a")))
            #expect(try await Self.rows(harness)[staleA]?.prefix(2) == ["active", ""])
        } cleanup: {
            await harness.close()
        }
    }

    @Test func aSecondReplicaWithoutTheLeaseDoesNothingAndAPausedHolderCannotWrite() async throws {
        let harness = try await Harness()
        try await withAsyncCleanup {
            for i in 1...5 {
                try await Self.insert(harness, Self.token(i), active: true, registeredAtMs: Self.staleCut - 1, lastEventAtMs: Self.staleCut - 1)
            }
            let before = try await Self.rows(harness)
            func generation() async throws -> Int64? {
                try await harness.pool.query("SELECT lease_generation FROM job_leases WHERE job = 'token_hygiene'").first?.int64("lease_generation")
            }
            let start = try #require(try await generation())
            // Replica A holds the lease (a pass in progress) with a short lease.
            let held = try #require(try await harness.store.takeLease(owner: "replica-a/1", duration: .milliseconds(500), interval: .seconds(3600)))
            #expect(held.cursor == nil && held.lease.generation == start + 1)
            // B finds it held: no pass, nothing written, nothing announced.
            let b = harness.runner(Self.settings(batch: 2), instance: "replica-b")
            #expect(try await b.runOnce() == nil)
            #expect(try await Self.rows(harness) == before)

            // A pauses past its lease; B takes over (the next generation) and does the pass.
            let pass = try await CampaignStoreTests.eventually("A's lease to expire") { try await b.runOnce() }
            #expect(pass.outcome == .completed && pass.deactivatedStale == 5)
            #expect(try await generation() == start + 2)
            // A wakes up: a page under its old generation rolls back and changes nothing.
            try await Self.insert(harness, Self.token(9), active: true, registeredAtMs: Self.staleCut - 1, lastEventAtMs: Self.staleCut - 1)
            let afterB = try await Self.rows(harness)
            await #expect(throws: TokenHygieneStore.LeaseLost.self) {
                _ = try await harness.store.sweepPage(held.lease, after: nil, limit: 100, cutoffs: Self.settings(batch: 2).cutoffs(nowMs: Self.now),
                                                      nowMs: Self.now) { _ in Issue.record("a holder without the lease announced tokens") }
            }
            await #expect(throws: TokenHygieneStore.LeaseLost.self) {
                _ = try await harness.store.deleteFinishedCampaigns(held.lease, before: Self.now, limit: 10)
            }
            #expect(try await !harness.store.finish(held.lease))
            #expect(try await !harness.store.release(held.lease))
            #expect(try await Self.rows(harness) == afterB)
        } cleanup: {
            await harness.close()
        }
    }

    struct AnnounceFailed: Error {}

    @Test func aPageWhoseAnnouncementFailsChangesNothingAndThePassResumesAtItsLastPage() async throws {
        let harness = try await Harness()
        try await withAsyncCleanup {
            for i in 1...7 {
                try await Self.insert(harness, Self.token(i), active: true, registeredAtMs: Self.staleCut - 1, lastEventAtMs: Self.staleCut - 1)
            }
            let cutoffs = Self.settings(batch: 3).cutoffs(nowMs: Self.now)
            let taken = try #require(try await harness.store.takeLease(owner: "a/1", duration: .seconds(30), interval: .seconds(3600)))
            let first = try await harness.store.sweepPage(taken.lease, after: nil, limit: 3, cutoffs: cutoffs, nowMs: Self.now) { tokens in
                #expect(tokens.map(\.deviceToken) == [Self.token(1), Self.token(2), Self.token(3)])
            }
            #expect(first == TokenHygieneStore.Page(deactivated: 3, deleted: 0, next: Self.token(3)))
            // The publication of the next page fails: its rows stay active and the position stays.
            let before = try await Self.rows(harness)
            await #expect(throws: AnnounceFailed.self) {
                _ = try await harness.store.sweepPage(taken.lease, after: first.next, limit: 3, cutoffs: cutoffs, nowMs: Self.now) { _ in throw AnnounceFailed() }
            }
            #expect(try await Self.rows(harness) == before)
            // A graceful stop frees the lease; the next holder resumes after the last committed page.
            #expect(try await harness.store.release(taken.lease))
            let resumed = try #require(try await harness.store.takeLease(owner: "b/1", duration: .seconds(30), interval: .seconds(3600)))
            #expect(resumed.cursor == Self.token(3) && resumed.lease.generation == taken.lease.generation + 1)
        } cleanup: {
            await harness.close()
        }
    }

    @Test func withKafkaDownNothingIsDeactivatedAndThePassCompletesOnceItIsBack() async throws {
        let harness = try await Harness(messageTimeout: .seconds(2))
        try await withAsyncCleanup {
            for i in 1...4 {
                try await Self.insert(harness, Self.token(i), active: true, registeredAtMs: Self.staleCut - 1, lastEventAtMs: Self.staleCut - 1)
            }
            let before = try await Self.rows(harness)
            try harness.cluster.setBrokerDown(1)
            let runner = harness.runner(Self.settings(batch: 10), instance: "replica-a", lease: .seconds(1))
            await #expect(throws: (any Error).self) { _ = try await runner.runOnce() }
            #expect(try await Self.rows(harness) == before)
            try harness.cluster.setBrokerUp(1)
            // The failed holder's lease runs out; a replica starts the pass again and announces every token.
            let other = harness.runner(Self.settings(batch: 10), instance: "replica-b")
            let pass = try await CampaignStoreTests.eventually("the pass after Kafka is back", timeout: .seconds(60)) { try? await other.runOnce() }
            #expect(pass.outcome == .completed && pass.deactivatedStale == 4)
            let events = try await harness.invalidations()
            #expect(Set(events.map(\.invalidatedBody.deviceToken)) == Set(before.keys))
            #expect(events.allSatisfy { $0.invalidatedBody.outcomeReason == .tokenStale })
        } cleanup: {
            await harness.close()
        }
    }
}
