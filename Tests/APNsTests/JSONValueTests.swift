import ProtobufCodec
import Testing

/// The project's one JSON reader (ProtobufCodec's `JSONValue`) as the APNs module reads payloads,
/// error bodies and JWT parts with it.
@Suite struct JSONValueTests {
    @Test func parsesWhatPayloadsUse() throws {
        let text = #" {"a":"x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","b":[1,-0.5e+3,true,false,null],"c":{},"a2":"é😀","n":0,"d":1,"d":2} "#
        guard case .object(let object) = try JSONValue(parsing: Array(text.utf8)) else { Issue.record("not an object"); return }
        #expect(object["a"] == .string("x\"\\/\u{08}\u{0C}\n\r\té😀"))
        #expect(object["a2"] == .string("é😀"))
        #expect(object["b"] == .array([.number("1"), .number("-0.5e+3"), .bool(true), .bool(false), .null]))
        #expect(object["c"] == .object(JSONObject()))
        #expect(object["n"]?.integerValue == 0)
        #expect(object["d"]?.integerValue == 2, "the last of duplicate keys wins")
        #expect(object["missing"] == nil)
        #expect(JSONValue.number("1.0").integerValue == nil)
        #expect(JSONValue.string("1").integerValue == nil)
    }

    @Test func refusesWhatRFC8259Refuses() {
        for bad in [#"{"a":1,}"#, "[01]", #""\x""#, "\"a\u{01}\"", "{'a':1}", "[1 2]", "-", "1.", "1e", "tru", "{} {}", "", #"{"a"}"#, "[" ] {
            #expect(throws: ProtobufError.self, "\(bad)") { try JSONValue(parsing: Array(bad.utf8)) }
        }
        #expect(throws: ProtobufError.self) { try JSONValue(parsing: Array(repeating: UInt8(ascii: "["), count: 10_000)) }
    }

    @Test func quotingRoundTrips() throws {
        for text in ["plain", "quote\" back\\slash", "line\nbreak\u{01}\u{08}\u{0C}", "ünï😀", "a/b"] {
            #expect(try JSONValue(parsing: Array(JSONValue.quote(text).utf8)) == .string(text))
        }
        #expect(JSONValue.quote("a/b\u{01}") == #""a/b\u0001""#, "/ is never escaped, controls are")
    }

    /// The one writer writes any value back as compact text, members and number literals as they are.
    @Test func writingAParsedDocumentGivesItsCompactText() throws {
        let compact = #"{"b":[1,-2.5e3,true,null,"x\"y"],"a":{"n":12345678901234567890,"s":"ü/"},"b":{}}"#
        #expect(String(decoding: try JSONValue(parsing: Array(compact.utf8)).serializedBytes, as: UTF8.self) == compact)
        let spaced = Array(" { \"k\" : [ 1 , 2 ] } ".utf8)
        #expect(String(decoding: try JSONValue(parsing: spaced).serializedBytes, as: UTF8.self) == #"{"k":[1,2]}"#)
    }

    @Test func builtValuesWriteInKeyOrderWithPlainNumbers() {
        let value = JSONValue.sortedObject([
            "z": .integer(UInt64.max), "a": .double(0.25), "m": .double(2), "n": .double(.nan), "s": .strings(["x", "y"]),
        ])
        #expect(String(decoding: value.serializedBytes, as: UTF8.self) == #"{"a":0.25,"m":2,"n":null,"s":["x","y"],"z":18446744073709551615}"#)
    }
}
