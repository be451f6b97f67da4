import APNs
import APNsSimulator
import DispatcherStatus
import Foundation
import Kafka
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

extension DispatcherEngineSuites {
    /// Broadcasts on a running engine (`EngineWorld`: real PostgreSQL, librdkafka's mock cluster, the
    /// APNs simulator over TLS): sent once with the channel's subscribers as its fan-out, never again
    /// when the request is read again (docs/live-activities.md "Never broadcast twice").
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(5)))
    struct BroadcastEngineTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        /// Broadcast requests the simulator received (answered or not).
        static func broadcastsReceived(_ world: EngineWorld) -> Int {
            world.simulator.receivedRequests().filter { $0.path.hasPrefix("/4/broadcasts/") }.count
        }

        /// A channel created at the simulator with `subscribers`, and its `active` row in `channels`
        /// named `name` (as a CREATE command leaves it; the suite's tests share one database).
        func channel(_ engine: RunningEngine, subscribers: Int, in world: EngineWorld, name: String) async throws -> String {
            let created = try await engine.client.createChannel(bundleID: EngineWorld.bundleID, environment: .production, policy: .noMessageStored)
            let id = try #require(created.channelID)
            try world.simulator.setChannelSubscribers(subscribers, channelID: id)
            let store = ChannelStore(pool: world.pool)
            let now = SystemWallClock().nowMilliseconds()
            let command = ChannelCommand(action: .create, bundleID: EngineWorld.bundleID, environment: .production, name: name,
                                         messageStoragePolicy: .noMessageStored)
            guard case .reserved(let row) = try await store.reserve(command, limit: 100, nowMs: now) else { throw TestFailure("not reserved") }
            try #require(try await store.transition(row, from: [.creating], to: .active, channelID: id, nowMs: now) != nil)
            return id
        }

        func channelState(_ world: EngineWorld, _ id: String) async throws -> String? {
            try await world.pool.query("SELECT state FROM channels WHERE channel_id = $1", [.string(id)]).first?.string("state")
        }

        /// One broadcast, accepted once: its report DELIVERED with apns-unique-id, the simulator's
        /// subscriber count reached, a RequestCompleted of 1. Read again: nothing sent, nothing
        /// published (request_completions); read again after its completion was lost: the same report
        /// (same event id) published again, still one broadcast at the simulator.
        @Test func aBroadcastIsSentOnceAndARedeliveryRepublishesItsReport() async throws {
            let world = try await EngineWorld()
            let engine = try world.startEngine()
            let id = try await channel(engine, subscribers: 25, in: world, name: "match-once")
            try await world.broadcast("bc-once", to: id)
            try await eventually("the broadcast completed") { world.feedback.completions("bc-once").count == 1 }
            let (eventID, report) = try #require(world.feedback.broadcastReports("bc-once").first)
            #expect(report.outcome == .delivered && report.httpStatus == 200 && !report.apnsUniqueID.isEmpty)
            #expect(report.channelID == id && report.bundleID == EngineWorld.bundleID && report.environment == .production)
            #expect(report.attempts == 1 && report.apnsRequestID.count == 36 && report.outcomeReason == .unspecified)
            #expect(eventID == FeedbackEventID.broadcastReport(requestID: "bc-once", channelID: id))
            #expect(world.simulator.counters()["broadcast_reached"] == 25, "the channel's subscribers are the fan-out")
            let completed = try #require(world.feedback.completions("bc-once").first)
            #expect((completed.total, completed.delivered) == (1, 1))
            #expect(try await world.sendLog("bc-once") == ["channel:" + id: "DELIVERED"])
            #expect(world.feedback.reports("bc-once").isEmpty, "no per-device reports")

            // Read again after it completed: finished at once.
            try await world.broadcast("bc-once", to: id)
            try await world.broadcast("bc-marker", to: id)
            try await eventually("the next request completed") { world.feedback.completions("bc-marker").count == 1 }
            #expect(world.feedback.completions("bc-once").count == 1 && world.feedback.broadcastReports("bc-once").count == 1)

            // Read again after a crash lost its completion: the recorded report again, never a second broadcast.
            _ = try await world.pool.execute("DELETE FROM request_completions WHERE request_id = 'bc-once'")
            try await world.broadcast("bc-once", to: id)
            try await eventually("the request completed again") { world.feedback.completions("bc-once").count == 2 }
            let reports = world.feedback.broadcastReports("bc-once")
            #expect(reports.count == 2 && reports.allSatisfy { $0.eventID == eventID && $0.report == report })
            #expect(Self.broadcastsReceived(world) == 2, "bc-once and bc-marker, each once")
            #expect(world.simulator.counters()["broadcast_reached"] == 50)
            try await engine.stop()
            await world.close()
        }

        /// The dispatcher stopped between the Apple request and its answer (a revocation that outlives
        /// its drain cancels the handling; the simulator never answers): the intent row stays PENDING,
        /// and the partition's next owner reports FAILED OUTCOME_REASON_UNCONFIRMED without a second
        /// Apple request.
        @Test func aPendingIntentIsReportedUnconfirmedAndNeverSentAgain() async throws {
            let world = try await EngineWorld()
            let configure: (inout DispatcherConfiguration) -> Void = { $0.revokeDrain = .milliseconds(300) }
            let first = try world.startEngine(instance: "a", configure: configure)
            let id = try await channel(first, subscribers: 3, in: world, name: "match-pending")
            var faults = APNsSimulatorFaults()
            faults.unansweredShare = 1
            world.simulator.setFaults(faults)
            try await world.broadcast("bc-pending", to: id)
            try await eventually("the intent written and the broadcast sent") {
                try await world.sendLog("bc-pending") == ["channel:" + id: "PENDING"] && Self.broadcastsReceived(world) == 1
            }
            // The request status counts no outcome yet (a PENDING row is not a skipped notification).
            let running = try #require(try await world.pool.withConnection { try await RequestStatusReader.status(requestID: "bc-pending", on: $0) })
            #expect(running.state == .running && running.counts.processed == 0 && running.counts.skipped == 0)
            let second = try world.startEngine(instance: "b", configure: configure)
            try await eventually("the request read again and completed", timeout: .seconds(40)) {
                world.feedback.completions("bc-pending").count == 1
            }
            let (eventID, report) = try #require(world.feedback.broadcastReports("bc-pending").first)
            #expect(report.outcome == .failed && report.outcomeReason == .unconfirmed && report.attempts == 1)
            #expect(eventID == FeedbackEventID.broadcastReport(requestID: "bc-pending", channelID: id))
            #expect(try await world.sendLog("bc-pending") == ["channel:" + id: "FAILED"])
            let completed = try #require(world.feedback.completions("bc-pending").first)
            #expect((completed.total, completed.failed) == (1, 1))
            #expect(Self.broadcastsReceived(world) == 1, "never broadcast twice")
            try await second.stop()
            try await first.stop()
            await world.close()
        }

        /// Refused before Apple: a Live Activity payload without aps.timestamp (REJECTED
        /// OUTCOME_REASON_INVALID_REQUEST) and a channel no row knows (REJECTED
        /// OUTCOME_REASON_CHANNEL_NOT_REGISTERED, apns_reason empty); neither reaches the simulator.
        @Test func refusalsBeforeAppleAreReportedRejected() async throws {
            let world = try await EngineWorld()
            let engine = try world.startEngine()
            let id = try await channel(engine, subscribers: 1, in: world, name: "match-refusals")
            try await world.broadcast("bc-no-timestamp", to: id, payload: #"{"aps":{"event":"update"}}"#)
            try await world.broadcast("bc-unknown", to: "AAAAAAAAAAAAAAAAAAAAAA==")
            try await eventually("both completed") {
                world.feedback.completions("bc-no-timestamp").count == 1 && world.feedback.completions("bc-unknown").count == 1
            }
            let refused = try #require(world.feedback.broadcastReports("bc-no-timestamp").first?.report)
            #expect(refused.outcome == .rejected && refused.outcomeReason == .invalidRequest && refused.httpStatus == 0)
            #expect(refused.channelName == "match-refusals")
            #expect(try await world.sendLog("bc-no-timestamp") == ["channel:" + id: "REJECTED"])
            let unknown = try #require(world.feedback.broadcastReports("bc-unknown").first?.report)
            #expect(unknown.outcome == .rejected && unknown.outcomeReason == .channelNotRegistered)
            #expect(unknown.apnsReason.isEmpty && unknown.httpStatus == 0 && unknown.channelName.isEmpty)
            #expect(Self.broadcastsReceived(world) == 0, "no Apple request")
            let completed = try #require(world.feedback.completions("bc-no-timestamp").first)
            #expect((completed.total, completed.rejected) == (1, 1))
            try await engine.stop()
            await world.close()
        }

        /// The issue's flow on one engine: a CREATE command → CREATED with Apple's id → a broadcast to it
        /// accepted once with the channel's subscribers as fan-out → a DELETE command → DELETED → a
        /// broadcast to it REJECTED OUTCOME_REASON_CHANNEL_NOT_REGISTERED without an Apple request.
        @Test func createBroadcastDeleteBroadcast() async throws {
            let world = try await EngineWorld()
            let engine = try world.startEngine()
            typealias Channels = ChannelEngineTests
            try await Channels.produce(Channels.command(.create, "flow-1", policy: .noMessageStored), in: world)
            try await eventually("CREATED") { Channels.events("flow-1", in: world).contains { $0.event.kind == .created } }
            let id = try #require(Channels.events("flow-1", in: world).first { $0.event.kind == .created }?.event.channelID)
            try world.simulator.setChannelSubscribers(40, channelID: id)
            try await world.broadcast("flow-bc-1", to: id)
            try await eventually("the first broadcast completed") { world.feedback.completions("flow-bc-1").count == 1 }
            let delivered = try #require(world.feedback.broadcastReports("flow-bc-1").first?.report)
            #expect(delivered.outcome == .delivered && delivered.channelName == "flow-1" && !delivered.apnsUniqueID.isEmpty)
            #expect(world.simulator.counters()["broadcast_reached"] == 40)
            try await Channels.produce(Channels.command(.delete, "flow-1"), in: world)
            try await eventually("DELETED") { Channels.events("flow-1", in: world).contains { $0.event.kind == .deleted } }
            try await world.broadcast("flow-bc-2", to: id)
            try await eventually("the second broadcast completed") { world.feedback.completions("flow-bc-2").count == 1 }
            let refused = try #require(world.feedback.broadcastReports("flow-bc-2").first?.report)
            #expect(refused.outcome == .rejected && refused.outcomeReason == .channelNotRegistered && refused.httpStatus == 0)
            #expect(Self.broadcastsReceived(world) == 1)
            try await engine.stop()
            await world.close()
        }

        /// A broadcast whose cancel arrived first (same key, same partition): SKIPPED
        /// OUTCOME_REASON_CANCELLED, the request CANCELLED, no Apple request.
        @Test func aCancelledBroadcastIsSkipped() async throws {
            let world = try await EngineWorld()
            let engine = try world.startEngine()
            let id = try await channel(engine, subscribers: 2, in: world, name: "match-cancelled")
            let cancel = CancelRequest(requestID: "bc-cancelled", reason: "test", requestedAtMs: SystemWallClock().nowMilliseconds())
            _ = try await world.producer.send(
                topic: world.topics.sendRequests, key: "bc-cancelled", value: cancel.serializedBytes(),
                headers: [KafkaHeader(name: "content-type", value: "application/x-protobuf; message=push.v1.CancelRequest")])
            try await eventually("the cancel recorded") {
                try await world.count("SELECT count(*) FROM cancellations WHERE request_id = $1", "bc-cancelled") == 1
            }
            try await world.broadcast("bc-cancelled", to: id)
            try await eventually("the broadcast completed") { world.feedback.completions("bc-cancelled").count == 1 }
            let skipped = try #require(world.feedback.broadcastReports("bc-cancelled").first?.report)
            #expect(skipped.outcome == .skipped && skipped.outcomeReason == .cancelled)
            let completed = try #require(world.feedback.completions("bc-cancelled").first)
            #expect(completed.status == .cancelled && (completed.total, completed.skipped) == (1, 1))
            #expect(Self.broadcastsReceived(world) == 0)
            try await engine.stop()
            await world.close()
        }

        /// A channel deleted at Apple while its row is active: Apple's ChannelNotRegistered is REJECTED
        /// with OUTCOME_REASON_CHANNEL_NOT_REGISTERED and Apple's reason, and the row becomes deleted, so
        /// the next broadcast to it is refused without an Apple request.
        @Test func applesChannelNotRegisteredMarksTheRowDeleted() async throws {
            let world = try await EngineWorld()
            let engine = try world.startEngine()
            let id = try await channel(engine, subscribers: 4, in: world, name: "match-gone")
            #expect(try await engine.client.deleteChannel(bundleID: EngineWorld.bundleID, environment: .production, channelID: id).status == 204)
            try await world.broadcast("bc-gone", to: id)
            try await eventually("the broadcast completed") { world.feedback.completions("bc-gone").count == 1 }
            let gone = try #require(world.feedback.broadcastReports("bc-gone").first?.report)
            #expect(gone.outcome == .rejected && gone.outcomeReason == .channelNotRegistered)
            #expect(gone.apnsReason == "ChannelNotRegistered" && gone.httpStatus == 400 && gone.channelName == "match-gone")
            #expect(try await channelState(world, id) == "deleted")
            try await world.broadcast("bc-gone-again", to: id)
            try await eventually("the second broadcast completed") { world.feedback.completions("bc-gone-again").count == 1 }
            let again = try #require(world.feedback.broadcastReports("bc-gone-again").first?.report)
            #expect(again.outcome == .rejected && again.outcomeReason == .channelNotRegistered && again.apnsReason.isEmpty)
            #expect(Self.broadcastsReceived(world) == 1, "the deleted row is refused locally")
            try await engine.stop()
            await world.close()
        }
    }
}
