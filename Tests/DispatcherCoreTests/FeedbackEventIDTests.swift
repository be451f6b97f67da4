import APNs
import Foundation
import PushMessages
import PushTestSupport
import Testing

@testable import DispatcherCore

/// Event ids that a reader can recompute (docs/contracts.md "Event ids"), and the dispatcher's own
/// outcome reasons for sends that threw.
@Suite struct FeedbackEventIDTests {
    static let token = String(repeating: "ab", count: 32)

    @Test func pythonDerivesTheSameIDs() async throws {
        let names = [
            "delivery-report\nreq-1\n\(Self.token)", "token-invalidated\n\(Self.token)\n1764512000000\nreq-1",
            "request-completed\nreq-1", "request-completed\nréq ✓",
            "broadcast-report\nreq-1\ndHmp9L2t0Bc=", "channel-event\ncom.example.scores\nPRODUCTION\nmatch-8812\nCREATED",
        ]
        let script = """
            import sys, uuid
            ns = uuid.UUID("26a8710c-1894-4fc1-b8dc-e7e709f9240b")
            for name in sys.argv[1:]:
                print(uuid.uuid5(ns, name))
            """
        let result = try await runProgram(["python3", "-c", script] + names, environment: ["PYTHONUTF8": "1"])
        #expect(result.status == 0, "\(result.output)")
        let python = result.output.split(separator: "\n").map(String.init)
        #expect(python == [
            FeedbackEventID.deliveryReport(requestID: "req-1", deviceToken: Self.token),
            FeedbackEventID.tokenInvalidated(deviceToken: Self.token, apnsTimestampMs: 1_764_512_000_000, requestID: "req-1"),
            FeedbackEventID.requestCompleted(requestID: "req-1"),
            FeedbackEventID.requestCompleted(requestID: "réq ✓"),
            FeedbackEventID.broadcastReport(requestID: "req-1", channelID: "dHmp9L2t0Bc="),
            FeedbackEventID.channelEvent(bundleID: "com.example.scores", environment: .production, name: "match-8812", kind: .created),
        ])
        #expect(FeedbackEventID.namespace.uuidString.lowercased() == "26a8710c-1894-4fc1-b8dc-e7e709f9240b")
    }

    @Test func eachFactHasItsOwnStableID() {
        let ids = [
            FeedbackEventID.deliveryReport(requestID: "req-1", deviceToken: Self.token),
            FeedbackEventID.deliveryReport(requestID: "req-2", deviceToken: Self.token),
            FeedbackEventID.tokenInvalidated(deviceToken: Self.token, apnsTimestampMs: 0, requestID: "req-1"),
            FeedbackEventID.tokenInvalidated(deviceToken: Self.token, apnsTimestampMs: 1, requestID: "req-1"),
            FeedbackEventID.requestCompleted(requestID: "req-1"),
        ]
        #expect(Set(ids).count == ids.count)
        #expect(ids.allSatisfy { $0 == $0.lowercased() && UUID(uuidString: $0) != nil })
        #expect(FeedbackEventID.requestCompleted(requestID: "req-1") == FeedbackEventID.requestCompleted(requestID: "req-1"))
        // A published event without an explicit id gets the same derivation.
        let completed = RequestCompleted(requestID: "req-1")
        #expect(FeedbackPublisher.derivedID(of: .requestCompleted(completed)) == FeedbackEventID.requestCompleted(requestID: "req-1"))
        let report = DeliveryReport(requestID: "req-1", deviceToken: Self.token)
        #expect(FeedbackPublisher.derivedID(of: .deliveryReport(report)) == ids[0])
        let broadcast = BroadcastReport(requestID: "req-1", channelID: "c")
        #expect(FeedbackPublisher.derivedID(of: .broadcastReport(broadcast)) == FeedbackEventID.broadcastReport(requestID: "req-1", channelID: "c"))
        let created = ChannelEvent(kind: .created, bundleID: "b", environment: .sandbox, name: "n")
        let deleted = ChannelEvent(kind: .deleted, bundleID: "b", environment: .sandbox, name: "n")
        #expect(FeedbackPublisher.derivedID(of: .channelEvent(created)) != FeedbackPublisher.derivedID(of: .channelEvent(deleted)))
        #expect(FeedbackPublisher.derivedID(of: .channelEvent(created))
            == FeedbackEventID.channelEvent(bundleID: "b", environment: .sandbox, name: "n", kind: .created))
    }

    @Test func sendsThatThrewGetTheDispatchersReason() {
        struct Other: Error {}
        #expect(SendRequestProcessor.outcomeReason(for: Other()) == .connectionError)
        #expect(SendRequestProcessor.outcomeReason(for: APNsError(code: .deliveryFailed, message: "reset", attempts: 3)) == .connectionError)
        #expect(SendRequestProcessor.outcomeReason(for: APNsError(code: .missingCredentials, message: "none")) == .providerTokenFault)
        #expect(SendRequestProcessor.outcomeReason(for: APNsError(code: .invalidRequest, message: "bad", reason: .badPriority)) == .invalidRequest)
        #expect(SendRequestProcessor.isProviderTokenFault(.expiredProviderToken))
        #expect(!SendRequestProcessor.isProviderTokenFault(.unregistered))
    }
}
