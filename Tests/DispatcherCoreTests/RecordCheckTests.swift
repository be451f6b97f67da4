import Foundation
import Kafka
import ProtobufCodec
import PushDomain
import PushMessages
import Testing

@testable import DispatcherCore

/// What the dispatcher refuses before anything reaches PostgreSQL or APNs: every refusal names the
/// field, so that the dead letter tells the producer what to fix.
@Suite struct RecordCheckTests {
    static let now: Int64 = 1_800_000_000_000
    static let token = String(repeating: "5a", count: 32)

    static func record(_ value: [UInt8], topic: String = "t", key: String? = token, contentType: String?) -> KafkaMessage {
        KafkaMessage(
            topic: topic, partition: 0, offset: 7, key: key.map { Array($0.utf8) }, value: value,
            headers: contentType.map { [KafkaHeader(name: "content-type", value: $0)] } ?? [], timestamp: nil)
    }

    static func tokenEvent(_ edit: (inout TokenEvent) -> Void) -> KafkaMessage {
        var device = Device()
        device.deviceToken = token
        device.bundleID = "com.example.app"
        device.environment = .production
        var event = TokenEvent(eventID: "e", action: .registered, device: device, eventTimeMs: now)
        edit(&event)
        return record(event.serializedBytes(), contentType: TokenEvent.protobufContentType)
    }

    func expectRefused(_ message: KafkaMessage, field: String, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            _ = try TokenEventChecker.checked(message, nowMs: Self.now)
            Issue.record("accepted a bad token event (\(field))", sourceLocation: sourceLocation)
        } catch let error as InvalidFieldError {
            #expect(error.field == field, "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("unexpected \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test func tokenEventsThatWouldCorruptTheTableAreRefused() throws {
        #expect(try TokenEventChecker.checked(Self.tokenEvent { _ in }, nowMs: Self.now).device?.deviceToken == Self.token)
        // A time far ahead would win over every later event of the token.
        expectRefused(Self.tokenEvent { $0.eventTimeMs = Self.now + 10 * 365 * 86_400_000 }, field: "event_time_ms")
        expectRefused(Self.tokenEvent { $0.eventTimeMs = 0 }, field: "event_time_ms")
        expectRefused(Self.tokenEvent { $0.action = .unspecified }, field: "action")
        expectRefused(Self.tokenEvent { $0.action = .unrecognized(9) }, field: "action")
        expectRefused(Self.tokenEvent { $0.device?.bundleID = "" }, field: "device.bundle_id")
        expectRefused(Self.tokenEvent { $0.device?.bundleID = "has space/ü" }, field: "device.bundle_id")
        expectRefused(Self.tokenEvent { $0.device?.environment = .unspecified }, field: "device.environment")
        expectRefused(Self.tokenEvent { $0.device?.userID = "alice\u{0}evil" }, field: "device.user_id")
        expectRefused(Self.tokenEvent { $0.device = nil }, field: "device")
        var wrongKey = Self.tokenEvent { _ in }
        wrongKey.key = Array(String(repeating: "ab", count: 32).utf8)
        expectRefused(wrongKey, field: "key")
        var wrongType = Self.tokenEvent { _ in }
        wrongType.headers = [KafkaHeader(name: "content-type", value: SendRequest.protobufContentType)]
        expectRefused(wrongType, field: "content-type")
        #expect(throws: ProtobufError.self) {
            try TokenEventChecker.checked(Self.record([0xFF, 0xFF], contentType: nil), nowMs: Self.now)
        }
    }

    static func sendRequest(_ edit: (inout SendRequest) -> Void) -> SendRequest {
        var notification = Notification()
        notification.bundleID = "com.example.app"
        notification.pushType = .alert
        notification.payload = #"{"aps":{"alert":"hi"}}"#
        var request = SendRequest(requestID: "r-1", target: .userIDs(UserIds(userIDs: ["u"])), notification: notification)
        edit(&request)
        return request
    }

    func expectRejected(_ message: KafkaMessage, startingWith prefix: String, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            _ = try SendRequestDecoder.decode(message)
            Issue.record("accepted a bad send request (\(prefix))", sourceLocation: sourceLocation)
        } catch {
            #expect(error.description.hasPrefix(prefix), "\(error)", sourceLocation: sourceLocation)
        }
    }

    func protobuf(_ edit: (inout SendRequest) -> Void, contentType: String? = SendRequest.protobufContentType) -> KafkaMessage {
        Self.record(Self.sendRequest(edit).serializedBytes(), key: "r-1", contentType: contentType)
    }

    @Test func sendRequestsAreDecodedByContentTypeAndCheckedField() throws {
        #expect(try SendRequestDecoder.decode(protobuf { _ in }).requestID == "r-1")
        #expect(try SendRequestDecoder.decode(protobuf({ _ in }, contentType: nil)).requestID == "r-1")
        let json = Self.record(Self.sendRequest { _ in }.jsonUTF8Bytes(), key: "r-1", contentType: "application/json")
        #expect(try SendRequestDecoder.decode(json).notification?.payload == #"{"aps":{"alert":"hi"}}"#)

        expectRejected(protobuf({ _ in }, contentType: "text/plain"), startingWith: "content-type:")
        expectRejected(protobuf({ _ in }, contentType: TokenEvent.protobufContentType), startingWith: "content-type:")
        expectRejected(protobuf { $0.requestID = "" }, startingWith: "request_id:")
        expectRejected(protobuf { $0.requestID = "X\u{0}first" }, startingWith: "request_id:")
        expectRejected(protobuf { $0.target = .userIDs(UserIds(userIDs: ["ok", "alice\u{0}evil"])) }, startingWith: "user_ids.user_ids[1]:")
        expectRejected(protobuf { $0.target = nil }, startingWith: "target:")
        expectRejected(protobuf { $0.notification?.bundleID = "bad bundle" }, startingWith: "notification.bundle_id:")
        expectRejected(protobuf { $0.notification?.pushType = .unrecognized(99) }, startingWith: "notification.push_type: unknown push type number 99")
        expectRejected(protobuf { $0.notification?.expiration = 1_800_000_000_000 }, startingWith: "notification.expiration:")
        expectRejected(protobuf { $0.notification?.collapseID = String(repeating: "é", count: 33) }, startingWith: "notification.collapse_id:")
        expectRejected(protobuf { $0.notification?.priority = 7 }, startingWith: "notification.priority:")
        expectRejected(protobuf { $0.notification?.payload = "[1,2]" }, startingWith: "notification.payload:")
        expectRejected(protobuf { $0.notification?.payload = "{\"aps\":{\"alert\":\"" + String(repeating: "😀", count: 1_020) + "\"}}" },
                       startingWith: "notification.payload:")
        expectRejected(Self.record([0x0A, 0xFF], contentType: nil), startingWith: "undecodable SendRequest")
    }
}
