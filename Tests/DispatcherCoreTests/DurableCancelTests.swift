import Foundation
import Kafka
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// Cancels of immediate requests on running dispatchers (real PostgreSQL and librdkafka's broker;
/// docs/campaigns.md "Cancellation"). Every token of these requests must end SKIPPED without a send:
/// the harness's sender fails the test if a notification reaches it.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(4)))
struct DurableCancelTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    static let bundleID = "com.example.app"

    /// Three active tokens of `userID`, each starting with `prefix` (two hex digits).
    static func register(_ userID: String, prefix: String, in store: TokenStore) async throws -> [String] {
        let tokens = (1...3).map { prefix + String(format: "%06x", $0) + String(repeating: "cd", count: 28) }
        let now = SystemWallClock().nowMilliseconds()
        let events = tokens.map { DispatcherHarness.registration(token: $0, bundleID: bundleID, userID: userID, eventTimeMs: now) }
        _ = try await store.applyBatch(events)
        return tokens
    }

    static func request(_ requestID: String, to userID: String) -> SendRequest {
        var notification = PushMessages.Notification()
        notification.bundleID = bundleID
        notification.pushType = .alert
        notification.payload = #"{"aps":{"alert":"hi"}}"#
        return SendRequest(requestID: requestID, target: .userIDs(UserIds(userIDs: [userID])), notification: notification)
    }

    static let cancelContentType = "application/x-protobuf; message=push.v1.CancelRequest"

    static func cancel(_ requestID: String) -> CancelRequest {
        CancelRequest(requestID: requestID, reason: "test", requestedAtMs: SystemWallClock().nowMilliseconds())
    }

    /// The request's `RequestCompleted` and its delivery reports, read from the feedback topic.
    static func outcome(of requestID: String, on harness: DispatcherHarness) async throws -> (RequestCompleted, [DeliveryReport]) {
        let records = try await harness.read(harness.topics.feedback, timeout: .seconds(60)) { records in
            records.contains { record in
                if case .requestCompleted(let completed)? = (try? FeedbackEvent(protobufBytes: record.value))?.event { return completed.requestID == requestID }
                return false
            }
        }
        var completed: RequestCompleted?
        var reports: [DeliveryReport] = []
        for record in records {
            switch (try? FeedbackEvent(protobufBytes: record.value))?.event {
            case .requestCompleted(let event)? where event.requestID == requestID: completed = event
            case .deliveryReport(let report)? where report.requestID == requestID: reports.append(report)
            default: break
            }
        }
        return (try #require(completed), reports)
    }

    static func expectCancelled(_ completed: RequestCompleted, _ reports: [DeliveryReport], tokens: [String]) {
        #expect(completed.status == .cancelled)
        #expect(completed.total == UInt32(tokens.count) && completed.skipped == UInt32(tokens.count) && completed.delivered == 0)
        #expect(Set(reports.map(\.deviceToken)) == Set(tokens))
        for report in reports { #expect(report.outcome == .skipped && report.outcomeReason == .cancelled) }
    }

    /// The defect this fixes: a list of the last 10,000 cancels forgot a cancel once 10,050 cancels
    /// for other ids followed it, and the request was then sent. Its cancel, then 10,050 cancels for
    /// other ids, then the request: it ends CANCELLED with every token SKIPPED.
    @Test func tenThousandFiftyCancelsForOtherIDsDoNotUndoACancel() async throws {
        let harness = try await DispatcherHarness()
        let tokens = try await Self.register("u-victim", prefix: "a1", in: harness.store)
        let topic = harness.topics.sendRequests
        try await harness.produce(topic, key: "victim", value: Self.cancel("victim").serializedBytes(), contentType: Self.cancelContentType)
        for chunk in stride(from: 0, to: 10_050, by: 1_000) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in chunk..<min(chunk + 1_000, 10_050) {
                    group.addTask {
                        let id = "other-\(index)"
                        try await harness.produce(topic, key: id, value: Self.cancel(id).serializedBytes(), contentType: Self.cancelContentType)
                    }
                }
                try await group.waitForAll()
            }
        }
        try await harness.produce(topic, key: "victim", value: Self.request("victim", to: "u-victim").serializedBytes(), contentType: SendRequest.protobufContentType)
        let (completed, reports) = try await Self.outcome(of: "victim", on: harness)
        Self.expectCancelled(completed, reports, tokens: tokens)
        #expect(try await harness.store.pool.query("SELECT count(*)::bigint AS n FROM cancellations").first?.int64("n") == 10_051)
        try await harness.stop()
    }

    /// A cancel received by another replica, on another topic partition, before its request: the
    /// replica that gets the request knows it (the cancellations table, read before its first record)
    /// and the request ends CANCELLED with every token SKIPPED.
    @Test func aCancelHandledByAnotherReplicaBeforeItsRequestCancelsIt() async throws {
        let other = try await DispatcherHarness()
        try await other.produce(other.topics.sendRequests, key: "early", value: Self.cancel("early").serializedBytes(), contentType: Self.cancelContentType)
        try await other.eventually("the other replica recorded the cancel") {
            try await other.store.pool.query("SELECT 1 FROM cancellations WHERE request_id = 'early'").count == 1
        }
        try await other.stop()

        let harness = try await DispatcherHarness()
        let tokens = try await Self.register("u-early", prefix: "b2", in: harness.store)
        try await harness.produce(
            harness.topics.sendRequests, key: "early", value: Self.request("early", to: "u-early").serializedBytes(),
            contentType: SendRequest.protobufContentType)
        let (completed, reports) = try await Self.outcome(of: "early", on: harness)
        Self.expectCancelled(completed, reports, tokens: tokens)
        try await harness.stop()
    }
}
