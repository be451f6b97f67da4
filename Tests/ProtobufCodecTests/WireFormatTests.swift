import ProtobufCodec
import PushMessages
import Testing

/// The byte-level examples of protobuf.dev/programming-guides/encoding, and the writer's and
/// reader's primitives.
@Suite("Wire format primitives")
struct WireFormatTests {
    @Test func varintsFromTheEncodingGuide() throws {
        // "150 is encoded as 9601"; 1 is 01; the maximum is 10 bytes.
        let cases: [(UInt64, String)] = [(0, "00"), (1, "01"), (127, "7f"), (128, "80 01"), (150, "96 01"), (300, "ac 02"),
                                         (UInt64.max, "ff ff ff ff ff ff ff ff ff 01")]
        for (value, expected) in cases {
            var writer = ProtobufWriter()
            writer.writeVarint(value)
            #expect(hex(writer.bytes) == expected)
            var reader = ProtobufReader(bytes: writer.bytes)
            #expect(try reader.readVarint() == value)
            #expect(reader.isAtEnd)
        }
    }

    @Test func zigZagFromTheEncodingGuide() {
        // The guide's table: 0 → 0, -1 → 1, 1 → 2, -2 → 3, 0x7fffffff → 0xfffffffe, -0x80000000 → 0xffffffff.
        let table: [(Int32, UInt32)] = [(0, 0), (-1, 1), (1, 2), (-2, 3), (Int32.max, 0xFFFF_FFFE), (Int32.min, 0xFFFF_FFFF)]
        for (value, encoded) in table {
            #expect(ZigZag.encode(value) == encoded)
            #expect(ZigZag.decode(encoded) == value)
        }
        #expect(ZigZag.encode(Int64.min) == UInt64.max)
        #expect(ZigZag.decode(UInt64.max - 1) == Int64.max)
    }

    @Test func messagesFromTheEncodingGuide() throws {
        // "message Test1 { int32 a = 1; }" with a = 150 → 08 96 01; "Test2 { string b = 2; }" with
        // b = "testing" → 12 07 74 65 73 74 69 6e 67. Scalars.fInt32 is field 3 and fString 14.
        #expect(hex(Scalars(fInt32: 150).serializedBytes()) == "18 96 01")
        #expect(hex(Scalars(fString: "testing").serializedBytes()) == "72 07 74 65 73 74 69 6e 67")
        // Packed: "repeated int32 f = 6 [packed=true]" with 3, 270, 86942 → 32 06 03 8e 02 9e a7 05 (here field 3: 1a).
        #expect(hex(Repeated(rInt32: [3, 270, 86942]).serializedBytes()) == "1a 06 03 8e 02 9e a7 05")
        #expect(hex(RepeatedUnpacked(rInt32: [3, 270]).serializedBytes()) == "18 03 18 8e 02")
    }

    @Test func fixedWidthIsLittleEndian() throws {
        #expect(hex(Scalars(fFixed32: 0x0102_0304).serializedBytes()) == "4d 04 03 02 01")
        #expect(hex(Scalars(fDouble: 1).serializedBytes()) == "09 00 00 00 00 00 00 f0 3f")
        #expect(hex(Scalars(fFloat: -2).serializedBytes()) == "15 00 00 00 c0")
    }

    @Test func unknownGroupsAreSkippedWhole() throws {
        // Field 30 as a group holding a varint, a nested group and a string, then a known field.
        let group: [UInt8] = [0xF3, 0x01, 0x08, 0x01, 0xA3, 0x01, 0x0D, 1, 2, 3, 4, 0xA4, 0x01, 0x12, 0x01, 0x41, 0xF4, 0x01]
        let notification = try Notification(protobufBytes: group + [0x3A, 0x02, 0x7B, 0x7D])
        #expect(notification.payload == "{}")
        #expect(notification.unknownFields.bytes == group)
        #expect(notification.serializedBytes() == [0x3A, 0x02, 0x7B, 0x7D] + group)
    }

    @Test func errorDescriptions() {
        let error = ProtobufError(.truncated, "truncated varint").prefixingPath("priority").prefixingPath("notification")
        #expect(error.description == "notification.priority: truncated varint")
        #expect(ProtobufError(.jsonTypeMismatch, "x").prefixingPath("[2]").prefixingPath("ids").description == "ids[2]: x")
        #expect(ProtobufError.Code.lengthPastEnd.description == "lengthPastEnd")
    }

    @Test func enumsAreOpen() {
        #expect(PushType(rawValue: 8) == .liveactivity)
        #expect(PushType(rawValue: 99) == .unrecognized(99))
        #expect(PushType.unrecognized(8) == .liveactivity)
        #expect(PushType(protoName: "PUSH_TYPE_PUSHTOTALK") == .pushtotalk)
        #expect(TokenKind.pushToTalk.protoName == "TOKEN_KIND_PUSH_TO_TALK")
        #expect(TokenEvent.Action.allCases == [.unspecified, .registered, .unregistered, .userForgotten])
        #expect(DeliveryOutcome(rawValue: 4) == .skipped)
        #expect(Environment.allCases.map(\.rawValue) == [0, 1, 2])
    }

    @Test func serviceDescriptors() {
        #expect(SendRequest.protobufContentType == "application/x-protobuf; message=push.v1.SendRequest")
        #expect(DeadLetter.Header.protoMessageName == "push.v1.DeadLetter.Header")
        #expect(TokenRegistry.serviceName == "push.v1.TokenRegistry")
        #expect(TokenRegistry.RegisterToken.path == "/push.v1.TokenRegistry/RegisterToken")
        #expect(TokenRegistry.UnregisterToken.Input.protoMessageName == "push.v1.UnregisterTokenRequest")
        #expect(TokenRegistry.UnregisterToken.Output.protoMessageName == "push.v1.UnregisterTokenResponse")
    }
}
