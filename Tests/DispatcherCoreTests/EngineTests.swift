import APNs
import APNsSimulator
import Foundation
import Kafka
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

extension DispatcherEngineSuites {
    /// The engine's guarantees (docs/dispatcher-engine.md "Invariants"), characterized on the whole
    /// engine: `Dispatcher` on librdkafka's mock cluster, the real PostgreSQL and the APNs simulator over
    /// TLS with the real APNs client (`EngineWorld`). The simulator's `hold` fault keeps chosen answers
    /// back, so a test has notifications in flight at a moment it chooses.
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(3)))
    struct EngineTests {
        /// Requests to the simulator for `token` (every attempt, any environment).
        static func received(_ world: EngineWorld, _ token: String) -> Int {
            world.simulator.receivedRequests().filter { $0.path == "/3/device/\(token)" }.count
        }

        static func hold(_ world: EngineWorld, _ tokens: [String]) {
            var faults = APNsSimulatorFaults()
            faults.hold = .init(tokens: Set(tokens))
            world.simulator.setFaults(faults)
        }

        /// Graceful shutdown while a request and a campaign page have notifications in flight: intake
        /// stops and queued records are dropped; the notifications in flight finish and are recorded,
        /// no new one starts; the finished prefix is committed and the unfinished request is read again
        /// by the next owner, which sends only what was never sent and publishes one `RequestCompleted`.
        /// The campaign stops after whole pages, its checkpoint at the last one, and the next owner
        /// resumes there.
        @Test func gracefulShutdownFinishesWhatIsInFlightAndTheNextOwnerDoesTheRest() async throws {
            let world = try await EngineWorld()
            let campaignTokens = (0..<10).map { EngineWorld.token("c", $0) }
            let held = [EngineWorld.token("a1"), EngineWorld.token("a2")]
            let waiting = (0..<4).map { EngineWorld.token("b", $0) }
            let single = EngineWorld.token("d1"), queuedToken = EngineWorld.token("e1")
            Self.hold(world, held + campaignTokens)
            let configure: (inout DispatcherConfiguration) -> Void = { configuration in
                // Two notifications at once; one record of the partition at a time, so the next ones queue.
                configuration.maxInFlightNotifications = 2
                configuration.maxInFlightPerPartition = 1
                configuration.campaigns.runnerEnabled = true
                configuration.campaigns.pageSize = 2
                configuration.campaigns.pagesInFlight = 1
                // One page unfinished at a time: the held answers stop the campaign after its first page.
                configuration.campaigns.maxUnfinishedPages = 1
            }
            let first = try world.startEngine(instance: "a", configure: configure)
            try await world.register(campaignTokens)
            try await eventually("the campaign's tokens registered") {
                try await world.pool.query("SELECT 1 FROM device_tokens WHERE device_token LIKE 'c%'").count == campaignTokens.count
            }
            // A request answered first: with token authentication the connection allows one stream
            // until a request succeeds (docs/apns-protocol.md), and the held answers must not be that one.
            try await world.send("done-1", to: [single])
            try await eventually("the request before them completed") { world.feedback.completions("done-1").count == 1 }
            try await world.sendToAudience("campaign-1")
            // The campaign's first page is in flight before the requests come: once a request's
            // notification waits for the budget, class priority admits no campaign notification.
            try await eventually("the campaign's first page's answers held") {
                Set(world.simulator.heldTokens()) == Set(campaignTokens.prefix(2))
            }
            let middle = try await world.send("middle-1", to: held + waiting)
            try await world.send("queued-1", to: [queuedToken])
            try await eventually("the request's and the campaign's first page's answers held") {
                Set(world.simulator.heldTokens()) == Set(held + campaignTokens.prefix(2))
            }
            try await eventually("the last record queued behind the running one") { first.recordsInFlight == 2 }

            first.shutdown.trigger()
            // The campaign runner stops first, after the page in flight: its answers are released until
            // the engine stopped its partitions (the queued record dropped). Only then do the request's
            // answers arrive, and the permits they free must start nothing.
            try await eventually("the queued record dropped") {
                for token in Set(world.simulator.heldTokens()) where token.hasPrefix("c") { world.simulator.releaseHeld(token: token) }
                return first.recordsInFlight == 1
            }
            for token in held { world.simulator.releaseHeld(token: token) }
            try await first.stop()

            #expect(try await world.sendLog("middle-1") == [held[0]: "DELIVERED", held[1]: "DELIVERED"])
            #expect(waiting.allSatisfy { Self.received(world, $0) == 0 }, "no notification started after the stop")
            #expect(Self.received(world, queuedToken) == 0)
            try await eventually("the recorded outcomes' reports read back") {
                Set(world.feedback.reports("middle-1").map(\.deviceToken)) == Set(held)
            }
            #expect(world.feedback.completions("middle-1").isEmpty)
            #expect(try await world.committedOffset() == middle.offset, "the finished prefix ends before the unfinished request")
            // The campaign: whole pages sent, in token order, the checkpoint at the last one, lease released.
            let sentPages = try await world.sendLog("campaign-1")
            let sent = campaignTokens.filter { sentPages[$0] != nil }
            #expect(sent == Array(campaignTokens.prefix(sent.count)) && sent.count % 2 == 0 && sent.count < campaignTokens.count,
                    "\(sent.count) campaign tokens sent before the stop")
            #expect(sentPages.values.allSatisfy { $0 == "DELIVERED" })
            let campaign = try #require(try await world.pool.query(
                "SELECT status, cursor, lease_owner FROM campaigns WHERE request_id = 'campaign-1'").first)
            #expect(try campaign.string("status") == "running")
            #expect(try campaign.string("cursor") == sent.last, "the checkpoint is the end of the last finished page")
            #expect(try campaign.string("lease_owner") == nil, "the lease is released")

            world.simulator.setFaults(APNsSimulatorFaults())
            let second = try world.startEngine(instance: "b", configure: configure)
            try await eventually("the next owner completed the request, the queued one and the campaign") {
                world.feedback.completions("middle-1").count == 1 && world.feedback.completions("queued-1").count == 1
                    && world.feedback.completions("campaign-1").count == 1
            }
            let completed = try #require(world.feedback.completions("middle-1").first)
            #expect((completed.total, completed.delivered) == (6, 6))
            #expect(held.allSatisfy { Self.received(world, $0) == 1 }, "what was recorded is not sent again")
            #expect(waiting.allSatisfy { Self.received(world, $0) == 1 })
            #expect(campaignTokens.allSatisfy { Self.received(world, $0) == 1 }, "the campaign resumed at its checkpoint")
            let campaignCompleted = try #require(world.feedback.completions("campaign-1").first)
            #expect((campaignCompleted.total, campaignCompleted.delivered) == (10, 10))
            // The first owner's reports were marked acknowledged: the next owner does not publish them again.
            #expect(world.feedback.reports("middle-1").count == 6)
            #expect(world.feedback.completions("done-1").count == 1)
            try await second.stop()
            await world.close()
        }

        /// Graceful shutdown while a notification waits on a timer for its next APNs attempt (Apple
        /// answers 503): it is parked (`pending_retries`), its record finishes and is committed, and the
        /// next owner re-drives the row once Apple answers again, publishing one `RequestCompleted`.
        @Test func gracefulShutdownParksANotificationWaitingForARetry() async throws {
            let world = try await EngineWorld()
            let token = EngineWorld.token("77")
            var faults = APNsSimulatorFaults()
            faults.statusShares = [503: 1]
            world.simulator.setFaults(faults)
            let first = try world.startEngine(instance: "a")
            let request = try await world.send("waiting-1", to: [token])
            try await eventually("the notification retrying on timers") { Self.received(world, token) >= 3 }
            #expect(try await world.count("SELECT count(*) FROM pending_retries WHERE request_id = $1", "waiting-1") == 0,
                    "below the cap and young, it waits in the process")
            try await first.stop()
            #expect(try await world.count("SELECT count(*) FROM pending_retries WHERE request_id = $1", "waiting-1") == 1)
            #expect(try await world.sendLog("waiting-1").isEmpty)
            #expect(try await world.committedOffset() == KafkaOffset(rawValue: request.offset.rawValue + 1), "its record finished")
            world.simulator.setFaults(APNsSimulatorFaults())
            let second = try world.startEngine(instance: "b")
            try await eventually("the parked notification re-driven and the request completed") {
                world.feedback.completions("waiting-1").count == 1
            }
            #expect(try await world.sendLog("waiting-1") == [token: "DELIVERED"])
            let completed = try #require(world.feedback.completions("waiting-1").first)
            #expect((completed.total, completed.delivered) == (1, 1))
            try await second.stop()
            await world.close()
        }

        /// A request whose `RequestCompleted` was acknowledged (`request_completions`), read again, is
        /// finished at once: nothing sent, nothing published.
        @Test func aRedeliveredFinishedRequestPublishesNothing() async throws {
            let world = try await EngineWorld()
            let engine = try world.startEngine { $0.maxInFlightPerPartition = 1 }
            let token = EngineWorld.token("f1"), later = EngineWorld.token("f2")
            try await world.send("finished-1", to: [token])
            try await eventually("the request completed and was recorded") {
                try await world.count("SELECT count(*) FROM request_completions WHERE request_id = $1", "finished-1") == 1
            }
            try await eventually("its completion read back") { world.feedback.completions("finished-1").count == 1 }
            let events = world.feedback.all.count
            // The same request again, then another one behind it on the same partition.
            try await world.send("finished-1", to: [token])
            try await world.send("after-1", to: [later])
            try await eventually("the request behind the redelivered one completed") { world.feedback.completions("after-1").count == 1 }
            #expect(world.feedback.completions("finished-1").count == 1)
            #expect(world.feedback.reports("finished-1").count == 1)
            #expect(Self.received(world, token) == 1)
            #expect(world.feedback.all.count == events + 2, "only the later request's report and completion")
            try await engine.stop()
            await world.close()
        }

        /// A request's first handling (its fingerprint recorded now) reads no progress: nothing of it
        /// can be stored yet. The same request read again after it finished reads its progress (one
        /// `progress` batch), finds it completed and sends nothing (docs/dispatcher-engine.md "Records
        /// handled again").
        @Test func onlyARequestHandledBeforeHasItsProgressRead() async throws {
            let world = try await EngineWorld()
            let engine = try world.startEngine { $0.maxInFlightPerPartition = 1 }
            func progressBatches() -> Double { MetricsRegistry.shared.value("push_batch_items", labels: ["progress"]) ?? 0 }
            let before = progressBatches()
            let token = EngineWorld.token("a1"), later = EngineWorld.token("a2")
            try await world.send("first-1", to: [token])
            try await eventually("the request completed and was recorded") {
                try await world.count("SELECT count(*) FROM request_completions WHERE request_id = $1", "first-1") == 1
            }
            #expect(progressBatches() == before, "a first handling reads no progress")
            try await world.send("first-1", to: [token])
            try await world.send("first-2", to: [later])
            try await eventually("the request behind the redelivered one completed") { world.feedback.completions("first-2").count == 1 }
            #expect(progressBatches() == before + 1, "only the redelivered request's progress was read")
            #expect(world.feedback.completions("first-1").count == 1)
            #expect(Self.received(world, token) == 1)
            try await engine.stop()
            await world.close()
        }

        /// The uncommitted span's cap (here 1 record): a notification APNs asks to retry is parked at
        /// once (`pending_retries` row written) and its record finishes, so the partition moves on; the
        /// parked row is re-driven once Apple answers again, recorded in `send_log`, and the request's one
        /// `RequestCompleted` counts from `send_log`.
        @Test func atTheCapARetryIsParkedTheRecordFinishesAndTheReDriveCompletesTheRequest() async throws {
            let world = try await EngineWorld()
            let tokens = [EngineWorld.token("71"), EngineWorld.token("72")], next = EngineWorld.token("73")
            var faults = APNsSimulatorFaults()
            faults.statusShares = [503: 1]
            world.simulator.setFaults(faults)
            let engine = try world.startEngine {
                $0.retryParking.maxUncommittedRecords = 1
                $0.maxInFlightPerPartition = 1
            }
            let parked = try await world.send("parked-1", to: tokens)
            try await eventually("both notifications parked and the record finished while Apple still refuses") {
                let parked = try await world.count("SELECT count(*) FROM pending_retries WHERE request_id = $1", "parked-1")
                let done = try await world.count("SELECT count(*) FROM pending_requests WHERE request_id = $1 AND record_done", "parked-1")
                return parked == 2 && done == 1
            }
            #expect(world.feedback.completions("parked-1").isEmpty, "no RequestCompleted while notifications are parked")
            // Apple answers again: the re-drives and a later request succeed.
            world.simulator.setFaults(APNsSimulatorFaults())
            try await world.send("next-1", to: [next])
            try await eventually("the parked notifications re-driven and the request completed") {
                let pending = try await world.count("SELECT count(*) FROM pending_requests WHERE request_id = $1", "parked-1")
                return pending == 0 && world.feedback.completions("parked-1").count == 1 && world.feedback.completions("next-1").count == 1
            }
            #expect(try await world.count("SELECT count(*) FROM pending_retries WHERE request_id = $1", "parked-1") == 0)
            #expect(try await world.sendLog("parked-1") == [tokens[0]: "DELIVERED", tokens[1]: "DELIVERED"])
            let completed = try #require(world.feedback.completions("parked-1").first)
            #expect((completed.total, completed.delivered, completed.failed) == (2, 2, 0), "counted from send_log")
            #expect(world.feedback.reports("parked-1").count == 2)
            #expect(tokens.allSatisfy { token in world.simulator.receivedRequests().filter { $0.path == "/3/device/\(token)" && $0.status == 200 }.count == 1 })
            try await engine.stop()
            #expect(try await world.committedOffset() == KafkaOffset(rawValue: parked.offset.rawValue + 2))
            await world.close()
        }

        /// The other-environment try (docs/semantics.md): a token stored as production that production
        /// refuses with BadDeviceToken is sent to sandbox, delivered there, and its row corrected.
        @Test func theOtherEnvironmentIsTriedAfterBadDeviceToken() async throws {
            let world = try await EngineWorld()
            let token = EngineWorld.token("9e")
            try world.simulator.register(.init(token: token, environment: .sandbox))
            let engine = try world.startEngine { $0.otherEnvironmentRetry.bundleIDs = [EngineWorld.bundleID] }
            try await world.register([token], environment: .production)
            // The first record waits for the group's first assignment (slow on a loaded machine).
            try await eventually("the token registered", timeout: .seconds(90)) {
                try await world.pool.query("SELECT 1 FROM device_tokens WHERE device_token = '\(token)'").count == 1
            }
            try await world.send("other-env-1", to: [token])
            try await eventually("the request completed") { world.feedback.completions("other-env-1").count == 1 }
            let attempts = world.simulator.receivedRequests().filter { $0.path == "/3/device/\(token)" }
            #expect(attempts.map(\.environment) == [.production, .sandbox])
            #expect(attempts.map(\.status) == [400, 200])
            #expect(try await world.sendLog("other-env-1") == [token: "DELIVERED"])
            let row = try #require(try await world.pool.query("SELECT environment FROM device_tokens WHERE device_token = '\(token)'").first)
            #expect(try row.string("environment") == "sandbox")
            try await engine.stop()
            await world.close()
        }

        /// A second member joins while a request has a notification in flight: the revoked partition's
        /// queued records are dropped, the running one gets `revokeDrain` and finishes inside it, its
        /// offset is committed in the rebalance, and the new owner goes on after it without sending or
        /// publishing it again.
        @Test func revocationDrainsTheRunningRequestAndStoresItsOffset() async throws {
            let world = try await EngineWorld()
            let held = EngineWorld.token("81"), queuedToken = EngineWorld.token("82")
            Self.hold(world, [held])
            let configure: (inout DispatcherConfiguration) -> Void = {
                $0.maxInFlightPerPartition = 1
                $0.revokeDrain = .seconds(20)
            }
            let first = try world.startEngine(instance: "a", configure: configure)
            try await world.send("drained-1", to: [held])
            try await world.send("after-drain-1", to: [queuedToken])
            try await eventually("the request's answer held") { world.simulator.heldTokens().count == 1 }
            try await eventually("the next record queued") { first.recordsInFlight == 2 }
            let second = try world.startEngine(instance: "b", configure: configure)
            try await eventually("the revocation dropped the queued record", timeout: .seconds(20)) { first.recordsInFlight == 1 }
            let released = ContinuousClock.now
            world.simulator.releaseHeld()
            try await eventually("both requests completed") {
                world.feedback.completions("drained-1").count == 1 && world.feedback.completions("after-drain-1").count == 1
            }
            #expect(ContinuousClock.now - released < .seconds(20))
            #expect(Self.received(world, held) == 1)
            #expect(Self.received(world, queuedToken) == 1)
            #expect(world.feedback.reports("drained-1").count == 1)
            try await second.stop()
            try await first.stop()
            #expect(world.feedback.completions("drained-1").count == 1, "the drained request was not handled again")
            await world.close()
        }

        /// A running request that outlives `revokeDrain` is cancelled when the drain is over: unfinished,
        /// its offset not stored; the partition's next owner reads it again and sends the notification
        /// whose answer never arrived once more (the crash window of a revocation), recording one outcome.
        @Test func revocationCancelsWhatOutlivesTheDrainAndStoresNothingForIt() async throws {
            let world = try await EngineWorld()
            let held = EngineWorld.token("5a")
            Self.hold(world, [held])
            let configure: (inout DispatcherConfiguration) -> Void = { $0.revokeDrain = .milliseconds(300) }
            let first = try world.startEngine(instance: "a", configure: configure)
            try await world.send("cut-1", to: [held])
            try await eventually("the request's answer held") { world.simulator.heldTokens().count == 1 }
            let second = try world.startEngine(instance: "b", configure: configure)
            try await eventually("the request read again by the partition's next owner", timeout: .seconds(40)) {
                world.simulator.heldTokens().count == 2
            }
            #expect(try await world.sendLog("cut-1").isEmpty, "the cancelled send recorded nothing")
            world.simulator.releaseHeld()
            try await eventually("the request completed") { world.feedback.completions("cut-1").count == 1 }
            #expect(try await world.sendLog("cut-1") == [held: "DELIVERED"])
            #expect(world.feedback.reports("cut-1").count == 1)
            #expect(Self.received(world, held) == 2)
            try await second.stop()
            try await first.stop()
            #expect(world.feedback.completions("cut-1").count == 1)
            await world.close()
        }

        /// A lost assignment (the coordinator forgot the member: its heartbeat is answered
        /// UNKNOWN_MEMBER_ID) stores nothing; the send in flight is not cancelled. The member joins again
        /// and reads the request again from the committed offset while its first handling still waits for
        /// Apple: the re-read record joins that handling and sends nothing (before, the lost partition's
        /// request was cancelled at once and the re-read record sent the notification a second time). Once
        /// Apple answers, one outcome is recorded and published, and one `RequestCompleted`.
        @Test func aLostAssignmentStoresNothingAndTheRequestIsReadAgain() async throws {
            let world = try await EngineWorld()
            let before = EngineWorld.token("10"), held = EngineWorld.token("11")
            Self.hold(world, [held])
            let engine = try world.startEngine {
                $0.maxInFlightPerPartition = 1
                // The coordinator drops the forgotten member id after this: the rejoin waits for it.
                $0.sessionTimeout = .seconds(3)
            }
            try await world.send("before-lost-1", to: [before])
            try await eventually("the first request completed") { world.feedback.completions("before-lost-1").count == 1 }
            try await world.send("lost-1", to: [held])
            try await eventually("the request's answer held") { world.simulator.heldTokens().count == 1 }
            // Heartbeats of any member of any group take these errors (the feedback reader's too): a few,
            // so that the engine's member gets one.
            world.cluster.pushRequestErrors(apiKey: .heartbeat, errors: Array(repeating: .unknownMemberID, count: 3))
            try await eventually("the request read again after the member joined again", timeout: .seconds(40)) {
                (engine.registry.value("push_request_rereads_joined_total") ?? 0) >= 1
            }
            #expect(Self.received(world, held) == 1, "the re-read record sent the held notification again")
            world.simulator.releaseHeld()
            try await eventually("the request completed") { world.feedback.completions("lost-1").count == 1 }
            #expect(try await world.sendLog("lost-1") == [held: "DELIVERED"])
            #expect(world.feedback.reports("lost-1").count == 1)
            try await engine.stop()
            #expect(world.feedback.completions("lost-1").count == 1)
            #expect(world.feedback.completions("before-lost-1").count == 1, "the request finished before the loss was not read again")
            #expect(Self.received(world, held) == 1)
            #expect(Self.received(world, before) == 1)
            await world.close()
        }
    }
}
