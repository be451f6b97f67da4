import Foundation
import ProtobufCodec
import PushMessages
import Testing

/// Checks `value` against protoc, the reference implementation:
/// - protoc decodes Swift's bytes to the same text as `text` (in protoc's layout);
/// - Swift decodes protoc's encoding of `text` to `value`;
/// - Swift's bytes decode back to `value`, and equal protoc's bytes when `sameBytes` (not for maps,
///   whose order protoc does not fix).
func expectMatchesProtoc<M: ProtobufMessage>(
    _ value: M, text: String, sameBytes: Bool = true, sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let type = M.protoMessageName
    let canonical = try Protoc.canonical(type, text)
    let swiftBytes = value.serializedBytes()
    #expect(try Protoc.decode(type, swiftBytes) == canonical, "protoc reads Swift's \(type) differently", sourceLocation: sourceLocation)
    let protocBytes = try Protoc.encode(type, text)
    #expect(try M(protobufBytes: protocBytes) == value, "Swift reads protoc's \(type) differently", sourceLocation: sourceLocation)
    #expect(try M(protobufBytes: swiftBytes) == value, "\(type) does not round-trip", sourceLocation: sourceLocation)
    if sameBytes {
        #expect(hex(swiftBytes) == hex(protocBytes), "\(type): bytes differ from protoc's", sourceLocation: sourceLocation)
    }
}

@Suite("Binary encoding against protoc")
struct ProtocInteropTests {
    @Test func everyMessageOfTheContract() throws {
        try expectMatchesProtoc(Samples.device, text: Samples.deviceText, sameBytes: false)
        try expectMatchesProtoc(Samples.tokenEvent, text: Samples.tokenEventText, sameBytes: false)
        try expectMatchesProtoc(Samples.registerTokenRequest, text: Samples.registerTokenRequestText, sameBytes: false)
        try expectMatchesProtoc(Samples.registerTokenResponse, text: Samples.registerTokenResponseText)
        try expectMatchesProtoc(Samples.unregisterTokenRequest, text: Samples.unregisterTokenRequestText)
        try expectMatchesProtoc(Samples.unregisterTokenResponse, text: Samples.unregisterTokenResponseText)
        try expectMatchesProtoc(Samples.notification, text: Samples.notificationText)
        try expectMatchesProtoc(Samples.deviceTokens, text: Samples.deviceTokensText)
        try expectMatchesProtoc(Samples.userIDs, text: Samples.userIDsText)
        try expectMatchesProtoc(Samples.appAudience, text: Samples.appAudienceText)
        try expectMatchesProtoc(Samples.deliveryReport, text: Samples.deliveryReportText)
        try expectMatchesProtoc(Samples.tokenInvalidated, text: Samples.tokenInvalidatedText)
        try expectMatchesProtoc(Samples.requestCompleted, text: Samples.requestCompletedText)
        try expectMatchesProtoc(Samples.campaignProgress, text: Samples.campaignProgressText)
        try expectMatchesProtoc(Samples.deadLetter, text: Samples.deadLetterText)
        try expectMatchesProtoc(Samples.cancelRequest, text: Samples.cancelRequestText)
        try expectMatchesProtoc(DeadLetter.Header(key: "k", value: [0, 1]), text: #"key: "k" value: "\000\001""#)
    }

    @Test func sendRequestTargetsEachOneofCase() throws {
        try expectMatchesProtoc(Samples.sendRequestTokens, text: Samples.sendRequestTokensText)
        try expectMatchesProtoc(Samples.sendRequestUsers, text: Samples.sendRequestUsersText)
        try expectMatchesProtoc(Samples.sendRequestAudience, text: Samples.sendRequestAudienceText)
        // A oneof member set to its default value is still present on the wire.
        try expectMatchesProtoc(SendRequest(target: .audience(AppAudience())), text: "audience {}")
    }

    @Test func feedbackEventEachOneofCase() throws {
        try expectMatchesProtoc(Samples.feedbackDelivery, text: Samples.feedbackDeliveryText)
        try expectMatchesProtoc(Samples.feedbackInvalidated, text: Samples.feedbackInvalidatedText)
        try expectMatchesProtoc(Samples.feedbackCompleted, text: Samples.feedbackCompletedText)
        try expectMatchesProtoc(Samples.feedbackProgress, text: Samples.feedbackProgressText)
    }

    @Test func registrationAuthContractMessages() throws {
        // Issue 13's additions: previous_token, batch register, forget-a-user, USER_FORGOTTEN.
        let device = Device(deviceToken: "ab" + String(repeating: "0", count: 62), bundleID: "com.example.app", userID: "u1")
        try expectMatchesProtoc(
            RegisterTokenRequest(device: device, previousToken: "cd" + String(repeating: "0", count: 62)),
            text: "device { device_token: \"ab\(String(repeating: "0", count: 62))\" bundle_id: \"com.example.app\" user_id: \"u1\" } "
                + "previous_token: \"cd\(String(repeating: "0", count: 62))\"")
        try expectMatchesProtoc(
            BatchRegisterTokensResponse(results: [
                BatchRegisterTokenResult(registered: RegisterTokenResponse(deviceToken: "ab", eventID: "e1", eventTimeMs: 5)),
                BatchRegisterTokenResult(code: 3, message: "registrations[1].device: is required"),
            ]),
            text: "results { registered { device_token: \"ab\" event_id: \"e1\" event_time_ms: 5 } } "
                + "results { code: 3 message: \"registrations[1].device: is required\" }")
        try expectMatchesProtoc(ForgetUserRequest(bundleID: "com.example.app", userID: "u1"), text: "bundle_id: \"com.example.app\" user_id: \"u1\"")
        try expectMatchesProtoc(
            TokenEvent(eventID: "f", action: .userForgotten, device: Device(bundleID: "b", userID: "u"), eventTimeMs: 9),
            text: "event_id: \"f\" action: USER_FORGOTTEN device { bundle_id: \"b\" user_id: \"u\" } event_time_ms: 9")
    }

    @Test func everyOutcomeReasonAndRequestStatusByName() throws {
        // Each Swift case is the .proto value of the same number and name, on the wire and in text.
        #expect(OutcomeReason.allCases.count == 20)
        for reason in OutcomeReason.allCases where reason != .unspecified {
            let name = try #require(reason.protoName)
            #expect(name.hasPrefix("OUTCOME_REASON_"))
            try expectMatchesProtoc(DeliveryReport(outcomeReason: reason), text: "outcome_reason: \(name)")
            try expectMatchesProtoc(TokenInvalidated(outcomeReason: reason), text: "outcome_reason: \(name)")
        }
        #expect(OutcomeReason.expired.rawValue == 1 && OutcomeReason.invalidDeviceToken.rawValue == 13)
        #expect(OutcomeReason.userForgotten.rawValue == 14 && OutcomeReason.tokenStale.rawValue == 15)
        #expect(OutcomeReason.noCredential.rawValue == 16)
        #expect(OutcomeReason.channelLimit.rawValue == 17 && OutcomeReason.channelNotRegistered.rawValue == 18)
        #expect(OutcomeReason.unconfirmed.rawValue == 19)
        #expect(RequestStatus.allCases.map(\.protoName) == [
            "REQUEST_STATUS_UNSPECIFIED", "REQUEST_STATUS_ACCEPTED", "REQUEST_STATUS_SCHEDULED", "REQUEST_STATUS_RUNNING",
            "REQUEST_STATUS_COMPLETED", "REQUEST_STATUS_CANCELLED",
        ])
        for status in RequestStatus.allCases where status != .unspecified {
            let name = try #require(status.protoName)
            try expectMatchesProtoc(RequestCompleted(status: status), text: "status: \(name)")
        }
        // A value from a newer contract survives as a number.
        try expectMatchesProtoc(DeliveryReport(outcomeReason: .unrecognized(99)), text: "outcome_reason: 99")
    }

    @Test func newFieldsHaveTheirContractNumbers() throws {
        // Wire compatibility: the numbers issue 8 added, checked byte by byte.
        #expect(hex(DeliveryReport(outcomeReason: .expired).serializedBytes()) == "90 01 01")  // field 18, varint
        #expect(hex(TokenInvalidated(outcomeReason: .expired).serializedBytes()) == "48 01")  // field 9
        #expect(hex(RequestCompleted(status: .cancelled).serializedBytes()) == "50 05")  // field 10
        #expect(hex(FeedbackEvent(traceParent: "t").serializedBytes()) == "3a 01 74")  // field 7
        #expect(hex(SendRequest(traceParent: "t", sendAtMs: 1).serializedBytes()) == "3a 01 74 40 01")  // fields 7, 8
        #expect(hex(CancelRequest(requestID: "r", reason: "x", requestedAtMs: 2, traceParent: "t").serializedBytes())
            == "0a 01 72 12 01 78 18 02 22 01 74")
        #expect(hex(DeadLetter(originalValueSize: 300, originalValueSha256: [0xAB], originalValueTruncated: true).serializedBytes())
            == "50 ac 02 5a 01 ab 60 01")  // fields 10, 11, 12
        // Issue 30's broadcast channels.
        #expect(hex(SendRequest(target: .channelID("c")).serializedBytes()) == "4a 01 63")  // field 9
        #expect(hex(FeedbackEvent(event: .broadcastReport(BroadcastReport(outcomeReason: .unconfirmed))).serializedBytes())
            == "42 03 80 01 13")  // field 8 { field 16 }
        #expect(hex(FeedbackEvent(event: .channelEvent(ChannelEvent(kind: .created))).serializedBytes()) == "4a 02 10 01")  // field 9 { 2 }
        #expect(hex(ChannelCommand(action: .delete, environment: .production, name: "n", messageStoragePolicy: .mostRecentMessageStored,
            deleteAfterMs: 1).serializedBytes()) == "08 02 18 02 22 01 6e 28 02 30 01")
        try expectMatchesProtoc(ChannelCommand(action: .create, bundleID: "b", messageStoragePolicy: .noMessageStored),
            text: #"action: CREATE bundle_id: "b" message_storage_policy: NO_MESSAGE_STORED"#)
        // A v1 reader that predates them keeps them as unknown fields: protoc sees the same message.
        let older = try Protoc.encode("push.v1.DeliveryReport", #"request_id: "r" outcome_reason: OUTCOME_REASON_EXPIRED"#)
        #expect(try DeliveryReport(protobufBytes: older) == DeliveryReport(requestID: "r", outcomeReason: .expired))
    }

    @Test func oneofLastFieldOnTheWireWins() throws {
        // Two different members: protobuf parsers keep the last one (protobuf.dev, "Oneof").
        let first = try Protoc.encode("push.v1.SendRequest", #"request_id: "r" device_tokens { device_tokens: "a" }"#)
        let second = try Protoc.encode("push.v1.SendRequest", #"user_ids { user_ids: "u" }"#)
        let decoded = try SendRequest(protobufBytes: first + second)
        #expect(decoded == SendRequest(requestID: "r", target: .userIDs(UserIds(userIDs: ["u"]))))
        #expect(try Protoc.decode("push.v1.SendRequest", decoded.serializedBytes())
            == Protoc.decode("push.v1.SendRequest", first + second))
        // The same member twice: the messages merge.
        let third = try Protoc.encode("push.v1.SendRequest", #"device_tokens { device_tokens: "b" }"#)
        let merged = try SendRequest(protobufBytes: first + third)
        #expect(merged.target == .deviceTokens(DeviceTokens(deviceTokens: ["a", "b"])))
        #expect(try Protoc.decode("push.v1.SendRequest", merged.serializedBytes())
            == Protoc.decode("push.v1.SendRequest", first + third))
        // Scalar members of a oneof, including a default value.
        try expectMatchesProtoc(Choice(value: .number(0), after: "x"), text: #"number: 0 after: "x""#)
        try expectMatchesProtoc(Choice(value: .text("")), text: #"text: """#)
        try expectMatchesProtoc(Choice(value: .color(.red)), text: "color: COLOR_RED")
        try expectMatchesProtoc(Choice(value: .data([0xFF])), text: #"data: "\377""#)
        try expectMatchesProtoc(Choice(value: .message(Scalars(fInt32: -5))), text: "message { f_int32: -5 }")
        let scalarThenMessage = try Protoc.encode("codectest.Choice", "number: 7") + Protoc.encode("codectest.Choice", "color: COLOR_GREEN")
        #expect(try Choice(protobufBytes: scalarThenMessage).value == .color(.green))
    }

    @Test func singularFieldsLaterValueWinsAndMessagesMerge() throws {
        let a = try Protoc.encode("push.v1.SendRequest", #"request_id: "a" notification { bundle_id: "x" priority: 5 }"#)
        let b = try Protoc.encode("push.v1.SendRequest", #"request_id: "b" notification { priority: 10 payload: "{}" }"#)
        let decoded = try SendRequest(protobufBytes: a + b)
        #expect(decoded == SendRequest(requestID: "b", notification: Notification(bundleID: "x", priority: 10, payload: "{}")))
        #expect(try Protoc.decode("push.v1.SendRequest", decoded.serializedBytes()) == Protoc.decode("push.v1.SendRequest", a + b))
    }

    @Test func mapsDecodeToTheSameContent() throws {
        // Map entry order is free on the wire, so compare decoded content, both ways.
        let maps = Maps(
            stringToString: ["": "empty key", "é": "", "b": "2", "a": "1"],
            int32ToInt64: [-1: Int64.min, 0: 0, Int32.max: Int64.max],
            int64ToString: [Int64.min: "min", 42: "x"],
            uint32ToBool: [0: true, UInt32.max: false],
            boolToString: [true: "yes", false: "no"],
            sint64ToBytes: [-3: [1, 2, 3], 3: []],
            stringToColor: ["r": .red, "g": .green, "u": .unrecognized(99)],
            stringToMessage: ["one": Scalars(fString: "1"), "empty": Scalars()],
            fixed32ToDouble: [7: 2.5, 8: -0.0]
        )
        let text = """
            string_to_string { key: "" value: "empty key" } string_to_string { key: "é" value: "" }
            string_to_string { key: "b" value: "2" } string_to_string { key: "a" value: "1" }
            int32_to_int64 { key: -1 value: -9223372036854775808 } int32_to_int64 { key: 0 value: 0 }
            int32_to_int64 { key: 2147483647 value: 9223372036854775807 }
            int64_to_string { key: -9223372036854775808 value: "min" } int64_to_string { key: 42 value: "x" }
            uint32_to_bool { key: 0 value: true } uint32_to_bool { key: 4294967295 value: false }
            bool_to_string { key: true value: "yes" } bool_to_string { key: false value: "no" }
            sint64_to_bytes { key: -3 value: "\\001\\002\\003" } sint64_to_bytes { key: 3 value: "" }
            string_to_color { key: "r" value: COLOR_RED } string_to_color { key: "g" value: COLOR_GREEN }
            string_to_color { key: "u" value: 99 }
            string_to_message { key: "one" value { f_string: "1" } } string_to_message { key: "empty" value {} }
            fixed32_to_double { key: 7 value: 2.5 } fixed32_to_double { key: 8 value: -0 }
            """
        try expectMatchesProtoc(maps, text: text, sameBytes: false)
        // A repeated key keeps the last value; entries may omit key or value, or list value first.
        let entries = try Protoc.encode("codectest.Maps", #"string_to_string { key: "k" value: "1" } string_to_string { key: "k" value: "2" }"#)
            + [0x0A, 0x00] // an empty entry: key "" -> value ""
            + [0x0A, 0x06, 0x12, 0x01, 0x76, 0x0A, 0x01, 0x6B] // value "v" before key "k"
        #expect(try Maps(protobufBytes: entries).stringToString == ["k": "v", "": ""])
    }

    @Test func packedAndUnpackedRepeatedFieldsDecodeBothWays() throws {
        let repeated = Repeated(
            rDouble: [1.5, -0.0, .infinity], rFloat: [0.25, -3], rInt32: [0, -1, Int32.max, Int32.min],
            rInt64: [Int64.min, -1, 1], rUint32: [0, UInt32.max], rUint64: [UInt64.max, 300],
            rSint32: [-1, 1, Int32.min], rSint64: [Int64.min, Int64.max], rFixed32: [1, UInt32.max],
            rFixed64: [UInt64.max], rSfixed32: [-2], rSfixed64: [Int64.min], rBool: [true, false, true],
            rString: ["a", "", "ß"], rBytes: [[], [0]], rColor: [.red, .unrecognized(-7), .unspecified],
            rMessage: [Scalars(fBool: true), Scalars()]
        )
        let text = """
            r_double: [1.5, -0, inf] r_float: [0.25, -3] r_int32: [0, -1, 2147483647, -2147483648]
            r_int64: [-9223372036854775808, -1, 1] r_uint32: [0, 4294967295] r_uint64: [18446744073709551615, 300]
            r_sint32: [-1, 1, -2147483648] r_sint64: [-9223372036854775808, 9223372036854775807]
            r_fixed32: [1, 4294967295] r_fixed64: 18446744073709551615 r_sfixed32: -2 r_sfixed64: -9223372036854775808
            r_bool: [true, false, true] r_string: ["a", "", "ß"] r_bytes: ["", "\\000"]
            r_color: [COLOR_RED, -7, COLOR_UNSPECIFIED] r_message { f_bool: true } r_message {}
            """
        try expectMatchesProtoc(repeated, text: text)
        var unpacked = RepeatedUnpacked()
        unpacked.merge(from: repeated)
        try expectMatchesProtoc(unpacked, text: text)
        // protoc's unpacked bytes decode into the packed type and the reverse.
        let unpackedBytes = try Protoc.encode("codectest.RepeatedUnpacked", text)
        let packedBytes = try Protoc.encode("codectest.Repeated", text)
        #expect(unpackedBytes != packedBytes)
        #expect(try Repeated(protobufBytes: unpackedBytes) == repeated)
        #expect(try RepeatedUnpacked(protobufBytes: packedBytes) == unpacked)
        // Packed and unpacked records of one field may alternate; elements append in order.
        let mixed = try Protoc.encode("codectest.Repeated", "r_int32: [1, 2]") + Protoc.encode("codectest.RepeatedUnpacked", "r_int32: [3]")
            + Protoc.encode("codectest.Repeated", "r_int32: [4]")
        #expect(try Repeated(protobufBytes: mixed).rInt32 == [1, 2, 3, 4])
    }

    @Test func defaultValuesAreNotEncoded() throws {
        #expect(SendRequest().serializedBytes().isEmpty)
        #expect(Scalars().serializedBytes().isEmpty)
        #expect(Repeated().serializedBytes().isEmpty)
        #expect(Maps().serializedBytes().isEmpty)
        let defaults = DeliveryReport(environment: .unspecified, pushType: .unspecified, outcome: .unspecified, httpStatus: 0)
        #expect(defaults.serializedBytes().isEmpty)
        #expect(try Protoc.decode("push.v1.DeliveryReport", defaults.serializedBytes()) == "")
        // Explicit defaults written by another encoder still decode.
        let explicit: [UInt8] = [0x0A, 0x00, 0x28, 0x00, 0x40, 0x00, 0x48, 0x00]
        #expect(try DeliveryReport(protobufBytes: explicit) == DeliveryReport())
    }

    @Test func optionalExpirationKeepsPresence() throws {
        let absent = Notification(bundleID: "b")
        let zero = Notification(bundleID: "b", expiration: 0)
        let time = Notification(bundleID: "b", expiration: 1_764_600_000)
        #expect(hex(absent.serializedBytes()) == "0a 01 62")
        #expect(hex(zero.serializedBytes()) == "0a 01 62 28 00")
        #expect(hex(time.serializedBytes()) == "0a 01 62 28 c0 d1 b6 c9 06")
        try expectMatchesProtoc(absent, text: #"bundle_id: "b""#)
        try expectMatchesProtoc(zero, text: #"bundle_id: "b" expiration: 0"#)
        try expectMatchesProtoc(time, text: #"bundle_id: "b" expiration: 1764600000"#)
        #expect(try Notification(protobufBytes: zero.serializedBytes()).expiration == 0)
        #expect(try Notification(protobufBytes: absent.serializedBytes()).expiration == nil)
        try expectMatchesProtoc(Scalars(optInt32: 0, optString: ""), text: #"opt_int32: 0 opt_string: """#)
    }

    @Test func negativeIntegersUseTenByteVarints() throws {
        let letter = DeadLetter(sourcePartition: -1, sourceOffset: Int64.min)
        #expect(hex(letter.serializedBytes()) == "10 ff ff ff ff ff ff ff ff ff 01 18 80 80 80 80 80 80 80 80 80 01")
        try expectMatchesProtoc(letter, text: "source_partition: -1 source_offset: -9223372036854775808")
        try expectMatchesProtoc(Notification(environment: .unrecognized(-2)), text: "environment: -2")
        try expectMatchesProtoc(Scalars(fInt32: Int32.min, fSint32: -1, fSint64: Int64.min, fSfixed32: -1), text: """
            f_int32: -2147483648 f_sint32: -1 f_sint64: -9223372036854775808 f_sfixed32: -1
            """)
    }

    @Test func everyScalarTypeAndTheLargestFieldNumber() throws {
        let scalars = Scalars(
            fDouble: -1.25e300, fFloat: 3.5, fInt32: 150, fInt64: -300, fUint32: 1 << 31, fUint64: 1 << 63,
            fSint32: Int32.max, fSint64: -2, fFixed32: 0xDEADBEEF, fFixed64: 0x0123_4567_89AB_CDEF,
            fSfixed32: Int32.min, fSfixed64: -42, fBool: true, fString: "s", fBytes: [0xC3, 0x28],
            fColor: .green, largestNumber: 1
        )
        try expectMatchesProtoc(scalars, text: """
            f_double: -1.25e+300 f_float: 3.5 f_int32: 150 f_int64: -300 f_uint32: 2147483648
            f_uint64: 9223372036854775808 f_sint32: 2147483647 f_sint64: -2 f_fixed32: 3735928559
            f_fixed64: 81985529216486895 f_sfixed32: -2147483648 f_sfixed64: -42 f_bool: true
            f_string: "s" f_bytes: "\\303(" f_color: COLOR_GREEN largest_number: 1
            """)
        // Field 536870911 with wire type 0: tag (536870911 << 3) as a 5-byte varint.
        #expect(hex(Scalars(largestNumber: 1).serializedBytes()) == "f8 ff ff ff 0f 01")
    }

    @Test func unicodeStringsAndLongLengths() throws {
        let text = "héllo wörld — 日本語 🚀👩🏽‍💻 e\u{301} \u{0}"
        let unicode = Notification(collapseID: text, payload: #"{"alert":"\#(text)"}"#)
        let bytes = unicode.serializedBytes()
        #expect(try Notification(protobufBytes: bytes).collapseID.utf8.elementsEqual(text.utf8))
        #expect(try Notification(protobufBytes: Protoc.encode("push.v1.Notification", Protoc.decode("push.v1.Notification", bytes))) == unicode)
        // Lengths around the 1-, 2- and 3-byte varint boundaries (the writer widens its length placeholder).
        for count in [127, 128, 16_383, 16_384, 70_000] {
            let long = Notification(payload: String(repeating: "x", count: count))
            let nested = SendRequest(notification: long)
            let protocBytes = try Protoc.encode("push.v1.SendRequest", #"notification { payload: "\#(long.payload)" }"#)
            #expect(nested.serializedBytes() == protocBytes, "length \(count)")
            #expect(try SendRequest(protobufBytes: protocBytes) == nested)
        }
    }

    @Test func emptyMessagesAndKeywordNames() throws {
        try expectMatchesProtoc(Empty(), text: "")
        #expect(try Empty(protobufBytes: [0x08, 0x01]).unknownFields.bytes == [0x08, 0x01])
        #expect(Empty().jsonString() == "{}")
        let keywords = Keywords(default: "d", class: -1, protocol: true, type: .in("i"), self: Keywords(type: .is("s")), kind: .case)
        try expectMatchesProtoc(keywords, text: #"default: "d" class: -1 protocol: true in: "i" self { is: "s" } kind: KIND_CASE"#)
        #expect(try Keywords(jsonString: keywords.jsonString()) == keywords)
        #expect(keywords.jsonString() == #"{"default":"d","class":-1,"protocol":true,"in":"i","self":{"is":"s"},"kind":"KIND_CASE"}"#)
    }

    @Test func recursiveMessages() throws {
        let tree = Tree(name: "root", children: [Tree(name: "a", children: [Tree(name: "a1")]), Tree(name: "b")],
                        parent: Tree(name: "up", parent: Tree(name: "upper")))
        try expectMatchesProtoc(tree, text: #"""
            name: "root" children { name: "a" children { name: "a1" } } children { name: "b" }
            parent { name: "up" parent { name: "upper" } }
            """#)
    }
}

extension RepeatedUnpacked {
    /// The same elements as `repeated` (the two types share field numbers and types).
    mutating func merge(from repeated: Repeated) {
        try! merge(protobufBytes: repeated.serializedBytes())
    }
}
