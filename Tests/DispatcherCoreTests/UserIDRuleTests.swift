import Foundation
import Kafka
import PushDomain
import PushMessages
import Testing

@testable import DispatcherCore

/// One user-id rule (`DeviceValidator.checkUserID`): the dispatcher's token-event checker refuses
/// exactly the user ids of a `USER_FORGOTTEN` event that it refuses in a registration, which are the
/// ones the registration service refuses. Before, a forget event took any non-empty id (a NUL one was
/// acknowledged, then matched no row, and the erasure never happened).
@Suite struct UserIDRuleTests {
    static let now: Int64 = 1_800_000_000_000
    static let bundle = "com.example.app"

    static func forget(_ userID: String) -> KafkaMessage {
        var device = Device()
        device.bundleID = bundle
        device.userID = userID
        let event = TokenEvent(eventID: "e", action: .userForgotten, device: device, eventTimeMs: now)
        return RecordCheckTests.record(event.serializedBytes(), key: "user:\(bundle):\(userID)", contentType: TokenEvent.protobufContentType)
    }

    static func register(_ userID: String) -> KafkaMessage {
        RecordCheckTests.tokenEvent { $0.device?.userID = userID }
    }

    static let userIDs = [
        "alice", "ü-ser 42", String(repeating: "a", count: 255), String(repeating: "a", count: 256), String(repeating: "é", count: 128),
        "alice\u{0}evil", "tab\there", "line\nbreak", "del\u{7F}", "",
    ]

    func accepted(_ message: KafkaMessage) -> Bool {
        (try? TokenEventChecker.checked(message, nowMs: Self.now)) != nil
    }

    @Test func forgetAndRegistrationRefuseTheSameUserIDs() {
        for userID in Self.userIDs where !userID.isEmpty {
            let byRule = (try? DeviceValidator.checkUserID(userID, field: "user_id", required: true)) != nil
            #expect(accepted(Self.forget(userID)) == byRule, "USER_FORGOTTEN \(userID.debugDescription)")
            #expect(accepted(Self.register(userID)) == byRule, "REGISTERED \(userID.debugDescription)")
        }
        // A registration may name no user; a forget must name one.
        #expect(accepted(Self.register("")))
        #expect(!accepted(Self.forget("")))
        #expect(!accepted(Self.forget("alice\u{0}evil")))
        #expect(accepted(Self.forget("alice")))
    }

    @Test func theRuleNamesTheField() {
        do {
            _ = try TokenEventChecker.checked(Self.forget("alice\u{0}evil"), nowMs: Self.now)
            Issue.record("accepted a NUL user id")
        } catch let error as InvalidFieldError {
            #expect(error.field == "device.user_id")
        } catch {
            Issue.record("unexpected \(error)")
        }
        let users = RecordCheckTests.sendRequest { $0.target = .userIDs(UserIds(userIDs: ["alice", "bob\u{0}"])) }
        do {
            try SendRequestDecoder.check(users)
            Issue.record("accepted a NUL user id in user_ids")
        } catch {
            #expect(error.description.hasPrefix("user_ids.user_ids[1]"), "\(error)")
        }
    }
}

/// Token events with event times at the Int64 edges are refused or accepted, never a trap.
@Suite struct TokenEventNumberEdgeTests {
    @Test func eventTimesAtTheEdges() {
        for (time, accepted) in [(Int64.min, false), (-1, false), (0, false), (1, true), (UserIDRuleTests.now, true), (Int64.max, false)] {
            let message = RecordCheckTests.tokenEvent { $0.eventTimeMs = time }
            #expect(((try? TokenEventChecker.checked(message, nowMs: UserIDRuleTests.now)) != nil) == accepted, "\(time)")
        }
    }
}
