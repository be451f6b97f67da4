import APNs
import APNsSimulator
import Foundation
import Kafka
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

extension DispatcherEngineSuites {
    /// The delivery pipeline's guarantees across its sources, on a running engine (`EngineWorld`: real
    /// PostgreSQL, librdkafka's mock cluster, the APNs simulator over TLS): the cancel check before every
    /// send, parked re-drives included; campaign notifications counted in `push_notifications_total`;
    /// `push_request_duration_seconds{lane}` observed where each `RequestCompleted` is acknowledged.
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(5)))
    struct PipelineEngineTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        static let cancelContentType = "application/x-protobuf; message=push.v1.CancelRequest"

        /// An in-flight budget of one permit still sends every notification of a batch: the loop that admits a batch hands every send but the batch's last to
        /// a send worker before it waits for the next permit, and runs only the last one itself
        /// (docs/dispatcher-engine.md "Send workers"). Kept back any earlier, a send would hold the one
        /// permit the loop waits for.
        @Test func aBudgetOfOnePermitSendsEveryNotificationOfABatch() async throws {
            let world = try await EngineWorld()
            let tokens = (0..<5).map { EngineWorld.token("b1", $0) }
            let engine = try world.startEngine { $0.maxInFlightNotifications = 1 }
            try await world.send("one-permit", to: tokens)
            try await eventually("the request completed") { world.feedback.completions("one-permit").count == 1 }
            let completed = try #require(world.feedback.completions("one-permit").first)
            #expect((completed.total, completed.delivered) == (5, 5))
            #expect(tokens.allSatisfy { token in world.simulator.receivedRequests().filter { $0.path == "/3/device/\(token)" }.count == 1 })
            try await engine.stop()
            await world.close()
        }

        /// A cancel that arrives while the request's notifications are parked: each re-drive is
        /// settled SKIPPED (OUTCOME_REASON_CANCELLED) without reaching Apple, and the request completes
        /// CANCELLED. (Before the re-drive consulted the cancel set, both were sent and delivered.)
        @Test func aParkedNotificationOfACancelledRequestIsSettledSkippedNotSent() async throws {
            let world = try await EngineWorld()
            let tokens = [EngineWorld.token("91"), EngineWorld.token("92")]
            var faults = APNsSimulatorFaults()
            faults.statusShares = [503: 1]
            world.simulator.setFaults(faults)
            let engine = try world.startEngine {
                $0.retryParking.maxUncommittedRecords = 1
                $0.maxInFlightPerPartition = 1
            }
            try await world.send("parked-cancel", to: tokens)
            try await eventually("both notifications parked and the record finished") {
                let parked = try await world.count("SELECT count(*) FROM pending_retries WHERE request_id = $1", "parked-cancel")
                let done = try await world.count("SELECT count(*) FROM pending_requests WHERE request_id = $1 AND record_done", "parked-cancel")
                return parked == 2 && done == 1
            }
            let cancel = CancelRequest(requestID: "parked-cancel", reason: "test", requestedAtMs: SystemWallClock().nowMilliseconds())
            _ = try await world.producer.send(
                topic: world.topics.sendRequests, key: "parked-cancel", value: cancel.serializedBytes(),
                headers: [KafkaHeader(name: "content-type", value: Self.cancelContentType)])
            try await eventually("the cancel recorded") {
                try await world.count("SELECT count(*) FROM cancellations WHERE request_id = $1", "parked-cancel") == 1
            }
            // Apple answers again: a re-drive that sent now would be delivered.
            world.simulator.setFaults(APNsSimulatorFaults())
            try await eventually("the parked notifications settled and the request completed") {
                world.feedback.completions("parked-cancel").count == 1
            }
            #expect(try await world.sendLog("parked-cancel") == [tokens[0]: "SKIPPED", tokens[1]: "SKIPPED"])
            let reports = world.feedback.reports("parked-cancel")
            #expect(reports.count == 2 && reports.allSatisfy { $0.outcome == .skipped && $0.outcomeReason == .cancelled })
            let completed = try #require(world.feedback.completions("parked-cancel").first)
            #expect(completed.status == .cancelled)
            #expect((completed.total, completed.skipped, completed.delivered) == (2, 2, 0))
            #expect(try await world.count(
                "SELECT count(*) FROM request_completions WHERE request_id = $1 AND status = 'cancelled'", "parked-cancel") == 1)
            let delivered = world.simulator.receivedRequests().filter { request in
                request.status == 200 && tokens.contains { request.path == "/3/device/\($0)" }
            }
            #expect(delivered.isEmpty, "no parked notification of the cancelled request reached Apple")
            try await engine.stop()
            await world.close()
        }

        /// Each stage of an immediate request is observed in `push_request_stage_seconds{stage}`, timed
        /// from the request's `created_at_ms`: with Apple answering after 1.2 s, the request's `sent`
        /// observation is above 1 s while its `consumed` and `resolved` ones are counted too.
        @Test func everyStageOfARequestIsObservedFromItsCreation() async throws {
            let world = try await EngineWorld()
            var faults = APNsSimulatorFaults()
            faults.latency = .init(minimum: .milliseconds(1_200), maximum: .milliseconds(1_200))
            world.simulator.setFaults(faults)
            let registry = MetricsRegistry.shared
            func count(_ stage: RequestStage) -> Double { registry.value("push_request_stage_seconds", labels: [stage.rawValue]) ?? 0 }
            /// Observations of `stage` above 1 s: its count less its `le="1"` bucket.
            func slow(_ stage: RequestStage) -> Double {
                let prefix = #"push_request_stage_seconds_bucket{stage="\#(stage.rawValue)",le="1"} "#
                let line = registry.render().split(separator: "\n").first { $0.hasPrefix(prefix) }
                return count(stage) - (line.flatMap { Double($0.dropFirst(prefix.count)) } ?? 0)
            }
            let before = RequestStage.allCases.map(count)
            let slowSentBefore = slow(.sent)
            let engine = try world.startEngine()
            try await world.send("staged-request", to: [EngineWorld.token("5b")])
            try await eventually("the request completed") { world.feedback.completions("staged-request").count == 1 }
            for (stage, earlier) in zip(RequestStage.allCases, before) {
                #expect(count(stage) >= earlier + 1, "stage \(stage.rawValue)")
            }
            #expect(slow(.sent) >= slowSentBefore + 1, "the 1.2 s answer is in the sent stage")
            try await engine.stop()
            await world.close()
        }

        /// A campaign's notifications reach `push_notifications_total` like a request's (the record
        /// stage counts every outcome this owner reached, whatever the source), and each completed
        /// request is observed once in `push_request_duration_seconds` under its lane. Apple refuses
        /// with a reason no other test of this target asks the simulator for, so the count is exact.
        @Test func campaignNotificationsAreCountedAndEveryLaneObservesItsDuration() async throws {
            let world = try await EngineWorld()
            let tokens = (0..<3).map { EngineWorld.token("e7", $0) }
            var faults = APNsSimulatorFaults()
            faults.reasonShares = [.topicDisallowed: 1]
            world.simulator.setFaults(faults)
            let registry = MetricsRegistry.shared
            let labels = ["rejected", APNsReason.topicDisallowed.rawValue]
            let countedBefore = registry.value("push_notifications_total", labels: labels) ?? 0
            let campaignsBefore = registry.value("push_request_duration_seconds", labels: ["campaign"]) ?? 0
            let requestsBefore = registry.value("push_request_duration_seconds", labels: ["transactional"]) ?? 0
            let engine = try world.startEngine { $0.campaigns.runnerEnabled = true }
            try await world.register(tokens)
            try await eventually("the campaign's tokens registered") {
                try await world.pool.query("SELECT 1 FROM device_tokens WHERE device_token LIKE 'e7%'").count == tokens.count
            }
            try await world.sendToAudience("counted-campaign")
            try await eventually("the campaign completed") { world.feedback.completions("counted-campaign").count == 1 }
            #expect(try await world.sendLog("counted-campaign") == Dictionary(uniqueKeysWithValues: tokens.map { ($0, "REJECTED") }))
            #expect(registry.value("push_notifications_total", labels: labels) == countedBefore + 3)
            #expect((registry.value("push_request_duration_seconds", labels: ["campaign"]) ?? 0) >= campaignsBefore + 1)
            try await world.send("timed-request", to: [EngineWorld.token("e8")])
            try await eventually("the request completed") { world.feedback.completions("timed-request").count == 1 }
            try await eventually("its duration observed") {
                (registry.value("push_request_duration_seconds", labels: ["transactional"]) ?? 0) >= requestsBefore + 1
            }
            try await engine.stop()
            await world.close()
        }
    }
}
