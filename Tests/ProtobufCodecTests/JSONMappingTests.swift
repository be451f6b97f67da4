import Foundation
import ProtobufCodec
import PushMessages
import Testing

/// A message of any type with what the checks need, so one list can hold every sample.
struct AnySample: @unchecked Sendable {
    let type: String
    let bytes: [UInt8]
    let json: (JSONEncodingOptions) -> [UInt8]
    let decodeJSON: ([UInt8]) throws -> [UInt8]  // JSON in, binary of the decoded message out
    let equalsJSON: ([UInt8]) throws -> Bool

    init<M: ProtobufMessage>(_ message: M) {
        type = M.protoMessageName
        bytes = message.serializedBytes()
        json = { message.jsonUTF8Bytes(options: $0) }
        decodeJSON = { try M(jsonUTF8: $0).serializedBytes() }
        equalsJSON = { try M(jsonUTF8: $0) == message }
    }
}

@Suite("Proto3 JSON mapping against Python's json_format")
struct JSONMappingTests {
    static let samples: [AnySample] = [
        AnySample(Samples.device), AnySample(Samples.tokenEvent), AnySample(Samples.registerTokenRequest),
        AnySample(Samples.registerTokenResponse), AnySample(Samples.unregisterTokenRequest),
        AnySample(Samples.unregisterTokenResponse), AnySample(Samples.notification), AnySample(Samples.deviceTokens),
        AnySample(Samples.userIDs), AnySample(Samples.appAudience), AnySample(Samples.sendRequestTokens),
        AnySample(Samples.sendRequestUsers), AnySample(Samples.sendRequestAudience), AnySample(Samples.deliveryReport),
        AnySample(Samples.tokenInvalidated), AnySample(Samples.requestCompleted), AnySample(Samples.campaignProgress),
        AnySample(Samples.feedbackDelivery), AnySample(Samples.feedbackInvalidated), AnySample(Samples.feedbackCompleted),
        AnySample(Samples.feedbackProgress), AnySample(Samples.deadLetter), AnySample(Samples.cancelRequest),
        AnySample(DeliveryReport(outcomeReason: .expired)), AnySample(DeliveryReport(outcomeReason: .unrecognized(99))),
        AnySample(TokenInvalidated(outcomeReason: .notForTopic)), AnySample(RequestCompleted(status: .completed)),
        AnySample(SendRequest(traceParent: Samples.traceParent, sendAtMs: Int64.max)),
        AnySample(DeadLetter(originalValueSize: UInt64.max, originalValueSha256: Array(repeating: 0xFF, count: 32))),
        AnySample(Notification(expiration: 0)), AnySample(Notification(environment: .unrecognized(7))),
        AnySample(SendRequest(target: .audience(AppAudience()))),
        AnySample(Scalars(
            fDouble: -1.25e300, fFloat: 0.1, fInt32: Int32.min, fInt64: Int64.min, fUint32: UInt32.max, fUint64: UInt64.max,
            fSint32: -7, fSint64: Int64.max, fFixed32: 1, fFixed64: UInt64.max, fSfixed32: -1, fSfixed64: Int64.min,
            fBool: true, fString: "\u{1}\t\"\\/é🚀", fBytes: [0xFB, 0xFF, 0x00], fColor: .green, optInt32: 0, optString: "",
            largestNumber: 9
        )),
        AnySample(Scalars(fDouble: .infinity, fFloat: -.infinity)),
        AnySample(Repeated(rDouble: [1, -2.5e-10], rInt64: [1, -1], rUint64: [UInt64.max], rBool: [false], rBytes: [[], [1]],
                           rColor: [.red, .unrecognized(9)], rMessage: [Scalars(), Scalars(fInt32: 1)])),
        AnySample(Maps(
            stringToString: ["a": "1", "é": ""], int32ToInt64: [-1: Int64.min], int64ToString: [Int64.max: "m"],
            uint32ToBool: [UInt32.max: true], boolToString: [true: "t", false: "f"], sint64ToBytes: [-5: [1, 2]],
            stringToColor: ["r": .red], stringToMessage: ["m": Scalars(fString: "x")], fixed32ToDouble: [3: 0.5]
        )),
        AnySample(Choice(value: .number(0))), AnySample(Choice(value: .data([]), after: "a")),
        AnySample(Tree(name: "t", children: [Tree(name: "c")], parent: Tree(name: "p"))),
    ]

    @Test func decodesWhatPythonWrites() throws {
        for (type, group) in Dictionary(grouping: Self.samples, by: \.type) {
            let texts = try PythonOracle.messageToJSON(type, group.map(\.bytes))
            for (sample, text) in zip(group, texts) {
                #expect(try sample.equalsJSON(Array(text.utf8)), "\(type) from Python JSON \(text)")
            }
        }
    }

    @Test func pythonReadsWhatSwiftWrites() throws {
        for options in [JSONEncodingOptions(), JSONEncodingOptions(useProtoFieldNames: true)] {
            for (type, group) in Dictionary(grouping: Self.samples, by: \.type) {
                let jsons = group.map { String(decoding: $0.json(options), as: UTF8.self) }
                let parsed = try PythonOracle.parseJSON(type, jsons)
                for ((sample, json), result) in zip(zip(group, jsons), parsed) {
                    let pythonBytes = try result.get()
                    // Python's deterministic encoding orders map keys as Swift does, so equal bytes
                    // are expected; when they differ, protoc judges the content.
                    if pythonBytes != sample.bytes {
                        #expect(try Protoc.decode(type, pythonBytes) == Protoc.decode(type, sample.bytes), "\(type): Python reads \(json)")
                    }
                    #expect(try sample.equalsJSON(Array(json.utf8)), "\(type) does not round-trip through \(json)")
                }
            }
        }
    }

    @Test func writesTheCanonicalShape() throws {
        #expect(Samples.sendRequestAudience.jsonString() == #"{"requestId":"req-3","audience":{"bundleId":"com.example.app","environment":"PRODUCTION"},"createdAtMs":"-1"}"#)
        #expect(Samples.sendRequestAudience.jsonString(options: JSONEncodingOptions(useProtoFieldNames: true))
            == #"{"request_id":"req-3","audience":{"bundle_id":"com.example.app","environment":"PRODUCTION"},"created_at_ms":"-1"}"#)
        #expect(Notification(expiration: 0).jsonString() == #"{"expiration":"0"}"#)
        #expect(Notification().jsonString() == "{}")
        #expect(Notification(pushType: .unrecognized(42)).jsonString() == #"{"pushType":42}"#)
        #expect(DeadLetter(originalKey: [0xFB, 0xFF]).jsonString() == #"{"originalKey":"+/8="}"#)
        #expect(Scalars(fDouble: .nan).jsonString() == #"{"fDouble":"NaN"}"#)
        // The fields of issue 8: enums by name, 64-bit integers as strings, bytes as base64.
        #expect(DeliveryReport(outcomeReason: .expired).jsonString() == #"{"outcomeReason":"OUTCOME_REASON_EXPIRED"}"#)
        #expect(TokenInvalidated(outcomeReason: .invalidDeviceToken).jsonString(options: JSONEncodingOptions(useProtoFieldNames: true))
            == #"{"outcome_reason":"OUTCOME_REASON_INVALID_DEVICE_TOKEN"}"#)
        #expect(RequestCompleted(status: .cancelled).jsonString() == #"{"status":"REQUEST_STATUS_CANCELLED"}"#)
        #expect(SendRequest(traceParent: "00-a-b-01", sendAtMs: 5).jsonString() == #"{"traceParent":"00-a-b-01","sendAtMs":"5"}"#)
        #expect(FeedbackEvent(traceParent: "t").jsonString() == #"{"traceParent":"t"}"#)
        #expect(Samples.cancelRequest.jsonString()
            == #"{"requestId":"req-1","reason":"sent_by_mistake","requestedAtMs":"1764512000500","traceParent":"\#(Samples.traceParent)"}"#)
        #expect(DeadLetter(originalValueSize: 7, originalValueSha256: [0xFB, 0xFF], originalValueTruncated: true).jsonString()
            == #"{"originalValueSize":"7","originalValueSha256":"+/8=","originalValueTruncated":true}"#)
        // Python spells these the same way.
        let python = try PythonOracle.messageToJSON("push.v1.DeadLetter", [DeadLetter(originalValueSize: 7, originalValueTruncated: true).serializedBytes()])
        #expect(try DeadLetter(jsonString: python[0]) == DeadLetter(originalValueSize: 7, originalValueTruncated: true))
        #expect(python[0].contains(#""originalValueSize": "7""#))
    }

    @Test func acceptsEveryInputFormOfTheSpec() throws {
        let json = """
            { "request_id": "r", "user_ids": { "userIds": ["u"] },
              "notification": { "bundleId": "b", "environment": 2, "push_type": "PUSH_TYPE_BACKGROUND",
                                "priority": "5", "expiration": 1.7646e9, "collapseId": null, "apnsId": "" },
              "createdAtMs": 1764512000000 }
            """
        let request = try SendRequest(jsonString: json)
        #expect(request == SendRequest(
            requestID: "r", target: .userIDs(UserIds(userIDs: ["u"])),
            notification: Notification(bundleID: "b", environment: .production, pushType: .background, priority: 5, expiration: 1_764_600_000),
            createdAtMs: 1_764_512_000_000))
        // Python agrees on every one of these forms.
        let python = try #require(try PythonOracle.parseJSON("push.v1.SendRequest", [json]).first).get()
        #expect(try SendRequest(protobufBytes: python) == request)
        // 64-bit extremes are exact as strings and as numbers.
        for text in [#"{"sourceOffset":"-9223372036854775808"}"#, #"{"sourceOffset":-9223372036854775808}"#] {
            #expect(try DeadLetter(jsonString: text).sourceOffset == Int64.min)
        }
        #expect(try CampaignProgress(jsonString: #"{"processed":18446744073709551615}"#).processed == UInt64.max)
        // URL-safe and unpadded base64.
        #expect(try DeadLetter(jsonString: #"{"originalKey":"-_8"}"#).originalKey == [0xFB, 0xFF])
        // null leaves a oneof unset.
        #expect(try SendRequest(jsonString: #"{"deviceTokens":null}"#).target == nil)
    }

    @Test func payloadSurvivesByteForByte() throws {
        // The payload is JSON text inside a JSON string; its own escapes, spacing and number
        // spellings must come through unchanged (never parsed and re-serialized).
        let payload = #"{ "aps" : {"alert":"a\/b \u00e9 \"q\"", "sound":"x.caf"},"n":1.50e+2, "big":12345678901234567890 }"#
        var writer = JSONWriter()
        writer.beginObject()
        writer.writeKey("notification")
        writer.beginObject()
        writer.writeKey("payload")
        writer.writeString(payload)
        writer.endObject()
        writer.endObject()
        let request = try SendRequest(jsonUTF8: writer.bytes)
        let decoded = try #require(request.notification?.payload)
        #expect(Array(decoded.utf8) == Array(payload.utf8))
        // The binary and JSON encodings carry the same bytes, and Python reads the same string.
        #expect(try SendRequest(protobufBytes: request.serializedBytes()).notification?.payload.utf8.elementsEqual(payload.utf8) == true)
        #expect(try SendRequest(jsonUTF8: request.jsonUTF8Bytes()).notification?.payload.utf8.elementsEqual(payload.utf8) == true)
        let python = try #require(try PythonOracle.parseJSON("push.v1.SendRequest", [String(decoding: writer.bytes, as: UTF8.self)]).first).get()
        #expect(try SendRequest(protobufBytes: python).notification?.payload.utf8.elementsEqual(payload.utf8) == true)
        // Escapes in the outer document are resolved exactly once.
        let escaped = #"{"payload":"{\"k\":\"\\u00e9\\/\",\"t\":\"\t\"}"}"#
        #expect(try Notification(jsonString: escaped).payload == "{\"k\":\"\\u00e9\\/\",\"t\":\"\t\"}")
    }

    @Test func errorsNameTheFieldPath() throws {
        let cases: [(String, ProtobufError.Code, String)] = [
            (#"{"notification":{"priority":"high"}}"#, .jsonTypeMismatch, #"notification.priority: expected an integer, found the string "high""#),
            (#"{"notification":{"priority":1.5}}"#, .jsonValueOutOfRange, "notification.priority: expected an integer, found 1.5, not integral"),
            (#"{"notification":{"priority":-1}}"#, .jsonValueOutOfRange, "notification.priority: expected an unsigned 32-bit integer, found -1, out of range"),
            (#"{"notification":{"expiration":"soon"}}"#, .jsonTypeMismatch, #"notification.expiration: expected an integer, found the string "soon""#),
            (#"{"notification":{"pushType":"PUSH_TYPE_FAX"}}"#, .unknownEnumName, #"notification.pushType: "PUSH_TYPE_FAX" is not a value of enum push.v1.PushType"#),
            (#"{"notification":{"payload":{"aps":{}}}}"#, .jsonTypeMismatch, "notification.payload: expected a string, found an object"),
            (#"{"notification":{"prio":1}}"#, .unknownJSONField, "notification.prio: unknown field of push.v1.Notification"),
            (#"{"notification":[]}"#, .jsonTypeMismatch, "notification: expected an object for push.v1.Notification, found an array"),
            (#"{"deviceTokens":{"deviceTokens":["a",1]}}"#, .jsonTypeMismatch, "deviceTokens.deviceTokens[1]: expected a string, found a number"),
            (#"{"deviceTokens":{"deviceTokens":"a"}}"#, .jsonTypeMismatch, "deviceTokens.deviceTokens: expected an array, found a string"),
            (#"{"deviceTokens":{},"userIds":{}}"#, .duplicateJSONField, #"userIds: oneof target already set by "deviceTokens""#),
            (#"{"requestId":"a","request_id":"b"}"#, .duplicateJSONField, "request_id: field given more than once"),
            (#"{"createdAtMs":true}"#, .jsonTypeMismatch, "createdAtMs: expected an integer, found true"),
            (#"[]"#, .jsonTypeMismatch, "expected an object for push.v1.SendRequest, found an array"),
        ]
        for (json, code, description) in cases {
            do {
                _ = try SendRequest(jsonString: json)
                Issue.record("accepted \(json)")
            } catch {
                #expect(error.code == code, "\(json)")
                #expect(error.description == description)
            }
        }
        do {
            _ = try RegisterTokenRequest(jsonString: #"{"device":{"attributes":{"locale":5}}}"#)
            Issue.record("accepted a number as a map value")
        } catch {
            #expect(error.description == #"device.attributes["locale"]: expected a string, found a number"#)
        }
        do {
            _ = try DeadLetter(jsonString: #"{"originalHeaders":[{"key":"k","value":"%%"}]}"#)
            Issue.record("accepted bad base64")
        } catch {
            #expect(error.code == .invalidBase64)
            #expect(error.fieldPath == "originalHeaders[0].value")
        }
        // Python's json_format refuses them too, except three it lets through where the proto3 JSON
        // spec (and C++'s parser) refuse: a list for a message, a field under both of its names.
        let lenientInPython: Set = [#"{"notification":[]}"#, #"{"requestId":"a","request_id":"b"}"#, "[]"]
        let python = try PythonOracle.parseJSON("push.v1.SendRequest", cases.map(\.0))
        for ((json, _, _), result) in zip(cases, python) {
            switch result {
            case .success: #expect(lenientInPython.contains(json), "Python accepts \(json)")
            case .failure: #expect(!lenientInPython.contains(json), "Python now refuses \(json)")
            }
        }
    }

    @Test func syntaxErrorsGiveTheOffset() throws {
        let cases: [(String, String)] = [
            (#"{"requestId":"a",}"#, "invalid JSON at byte 17: expected a string key, found '}'"),
            (#"{"requestId" "a"}"#, #"invalid JSON at byte 13: expected ':' after the key "requestId", found '"'"#),
            (#"{"requestId":"a"} x"#, "invalid JSON at byte 18: unexpected 'x' after the JSON value"),
            (#"{"requestId":"a"#, "invalid JSON at byte 13: unterminated string"),
            (#"{"createdAtMs":01}"#, "invalid JSON at byte 16: expected ',' or '}' in an object, found '1'"),
            (#"{"requestId":"\ud800"}"#, "invalid JSON at byte 20: unpaired UTF-16 surrogate in a \\u escape"),
            ("{\"requestId\":\"a\u{1}\"}", "invalid JSON at byte 15: unescaped control character in a string"),
            ("", "invalid JSON at byte 0: expected a value, found the end of the input"),
        ]
        for (json, description) in cases {
            do {
                _ = try SendRequest(jsonString: json)
                Issue.record("accepted \(json)")
            } catch {
                #expect(error.code == .invalidJSON)
                #expect(error.description == description)
            }
        }
        do {
            _ = try SendRequest(jsonUTF8: Array(#"{"requestId":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8))
            Issue.record("accepted invalid UTF-8")
        } catch {
            #expect(error.code == .invalidUTF8)
        }
        let deep = String(repeating: "[", count: 200) + String(repeating: "]", count: 200)
        #expect(throws: ProtobufError.self) { try SendRequest(jsonString: #"{"x":\#(deep)}"#, options: JSONDecodingOptions(ignoreUnknownFields: true)) }
    }

    @Test func unknownFieldsCanBeIgnored() throws {
        let json = #"{"requestId":"r","futureField":{"nested":[1,2]},"notification":{"newThing":true,"payload":"{}"}}"#
        #expect(throws: ProtobufError.self) { try SendRequest(jsonString: json) }
        let request = try SendRequest(jsonString: json, options: JSONDecodingOptions(ignoreUnknownFields: true))
        #expect(request == SendRequest(requestID: "r", notification: Notification(payload: "{}")))
    }
}

@Suite("Proto3 JSON map keys")
struct JSONMapKeyTests {
    @Test func keysOfEveryTypeAreStrings() throws {
        let maps = try Maps(jsonString: #"{"int32ToInt64":{"-1":"5"},"boolToString":{"true":"t"},"uint32ToBool":{"4294967295":true}}"#)
        #expect(maps.int32ToInt64 == [-1: 5])
        #expect(maps.boolToString == [true: "t"])
        #expect(maps.uint32ToBool == [UInt32.max: true])
        #expect(maps.jsonString() == #"{"int32ToInt64":{"-1":"5"},"uint32ToBool":{"4294967295":true},"boolToString":{"true":"t"}}"#)
        for (json, description) in [
            (#"{"int32ToInt64":{"x":"5"}}"#, #"int32ToInt64["x"]: expected an integer, found the string "x""#),
            (#"{"boolToString":{"yes":"t"}}"#, #"boolToString["yes"]: expected the map key true or false, found "yes""#),
            (#"{"int32ToInt64":{"1":"5","1":"6"}}"#, #"int32ToInt64["1"]: duplicate map key"#),
        ] {
            do {
                _ = try Maps(jsonString: json)
                Issue.record("accepted \(json)")
            } catch {
                #expect(error.description == description)
            }
        }
    }
}
