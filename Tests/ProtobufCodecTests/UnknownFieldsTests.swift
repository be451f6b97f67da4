import ProtobufCodec
import PushMessages
import Testing

/// A producer on a later contract (`Protos/v2/push_v2.proto`, proto2 with fields of every wire type,
/// groups included) writes; the v1 Swift types must read what they know and pass the rest on.
@Suite("Unknown fields from a newer contract")
struct UnknownFieldsTests {
    static let v2Text = """
        request_id: "req-v2"
        device_tokens { device_tokens: "aa" device_tokens: "bb" extra_count: -3 }
        notification {
          bundle_id: "com.example.app" environment: STAGING push_type: 1 priority: 5 expiration: 0
          payload: "{}" extra_varint: 18446744073709551615 extra_fixed64: 81985529216486895
          extra_text: "newer ✓" ExtraGroup { a: -1 b: "in group" Inner { c: 7 } }
          extra_fixed32: 4294967295 extra_packed: [-1, 0, 1, -2147483648] extra_far: -5
        }
        created_at_ms: 1764512000000 trace_parent: "trace-1" send_at_ms: 1764512600000
        extra_ids: [1, 18446744073709551615]
        """

    @Test func newerFieldsAreKeptAndWrittenBack() throws {
        let v2Bytes = try Protoc.encode("pushv2.SendRequest", Self.v2Text)
        let request = try SendRequest(protobufBytes: v2Bytes)

        // What v1 knows is decoded.
        #expect(request.requestID == "req-v2")
        #expect(request.createdAtMs == 1_764_512_000_000)
        #expect(request.traceParent == "trace-1")
        #expect(request.sendAtMs == 1_764_512_600_000)
        guard case .deviceTokens(let tokens)? = request.target else {
            Issue.record("target is \(String(describing: request.target))")
            return
        }
        #expect(tokens.deviceTokens == ["aa", "bb"])
        let notification = try #require(request.notification)
        #expect(notification.bundleID == "com.example.app")
        #expect(notification.environment == .unrecognized(3))
        #expect(notification.environment.protoName == nil)
        #expect(notification.pushType == .alert)
        #expect(notification.expiration == 0)
        #expect(notification.payload == "{}")

        // What it does not know is kept, at every level.
        #expect(!request.unknownFields.isEmpty)
        #expect(!tokens.unknownFields.isEmpty)
        #expect(!notification.unknownFields.isEmpty)

        // Re-encoded by v1, the record still reads as the same v2 message.
        let reencoded = request.serializedBytes()
        #expect(try Protoc.decode("pushv2.SendRequest", reencoded) == Protoc.decode("pushv2.SendRequest", v2Bytes))
        #expect(try SendRequest(protobufBytes: reencoded) == request)

        // Changing a known field keeps the unknown ones.
        var changed = request
        changed.notification?.priority = 10
        let expected = Self.v2Text.replacingOccurrences(of: "priority: 5", with: "priority: 10")
        #expect(try Protoc.decode("pushv2.SendRequest", changed.serializedBytes()) == Protoc.canonical("pushv2.SendRequest", expected))
    }

    @Test func dropsNothingWhenTheKnownWireTypeDiffers() throws {
        // Field 1 of Notification as a varint (v1 says string): kept as unknown, not an error,
        // as protobuf parsers do for a wire type that does not match the field.
        let bytes: [UInt8] = [0x08, 0x96, 0x01, 0x3A, 0x02, 0x7B, 0x7D]
        let notification = try Notification(protobufBytes: bytes)
        #expect(notification.bundleID == "")
        #expect(notification.payload == "{}")
        #expect(notification.unknownFields.bytes == [0x08, 0x96, 0x01])
        #expect(notification.serializedBytes() == [0x3A, 0x02, 0x7B, 0x7D, 0x08, 0x96, 0x01])
    }

    @Test func unknownFieldsMakeMessagesDiffer() throws {
        let plain = try Notification(protobufBytes: Protoc.encode("pushv2.Notification", #"payload: "{}""#))
        let extra = try Notification(protobufBytes: Protoc.encode("pushv2.Notification", #"payload: "{}" extra_text: "x""#))
        #expect(plain.payload == extra.payload)
        #expect(plain != extra)
        var cleared = extra
        cleared.unknownFields = UnknownFields()
        #expect(cleared == plain)
    }
}
