/// The one error type of `ProtobufCodec`: malformed binary input, malformed or mistyped JSON.
///
/// `fieldPath` names where the problem is, outermost field first: proto field names for binary input
/// (`notification.payload`), the JSON keys as written for JSON input (`notification.priority`,
/// `deviceTokens.deviceTokens[2]`, `device.attributes["locale"]`). `description` reads
/// `"notification.priority: expected an integer, found a string"`.
public struct ProtobufError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of problem it is. New codes may be added; switch with a `default`.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String, Sendable, Hashable {
            case truncated, malformedVarint, invalidWireType, invalidFieldNumber, lengthPastEnd,
                 invalidUTF8, unmatchedGroup, nestingTooDeep, invalidJSON, jsonTypeMismatch,
                 jsonValueOutOfRange, unknownJSONField, duplicateJSONField, unknownEnumName, invalidBase64,
                 tooManyElements
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// The input ends inside a tag, varint, fixed-size value or length-delimited field.
        public static let truncated = Code(.truncated)
        /// A varint longer than 10 bytes, or whose 10th byte carries bits past 64.
        public static let malformedVarint = Code(.malformedVarint)
        /// A tag carries wire type 6 or 7 (protobuf.dev/programming-guides/encoding, "Message Structure").
        public static let invalidWireType = Code(.invalidWireType)
        /// A tag carries field number 0 or one above 2^29 - 1.
        public static let invalidFieldNumber = Code(.invalidFieldNumber)
        /// A length prefix reaches past the end of the enclosing message or input.
        public static let lengthPastEnd = Code(.lengthPastEnd)
        /// A `string` field (binary or JSON) is not valid UTF-8.
        public static let invalidUTF8 = Code(.invalidUTF8)
        /// An end-group tag without its start-group tag, or a group that never ends.
        public static let unmatchedGroup = Code(.unmatchedGroup)
        /// Messages, groups or JSON values nested deeper than the limit (100).
        public static let nestingTooDeep = Code(.nestingTooDeep)
        /// The JSON text is not well-formed JSON (RFC 8259).
        public static let invalidJSON = Code(.invalidJSON)
        /// A JSON value has the wrong type for its field (a string where an integer belongs, …).
        public static let jsonTypeMismatch = Code(.jsonTypeMismatch)
        /// A JSON number is out of the field's range or not integral.
        public static let jsonValueOutOfRange = Code(.jsonValueOutOfRange)
        /// A JSON key names no field of the message (and unknown fields are not ignored).
        public static let unknownJSONField = Code(.unknownJSONField)
        /// A field (under either of its names) or two members of one oneof appear in one JSON object.
        public static let duplicateJSONField = Code(.duplicateJSONField)
        /// A JSON enum value names no value of the enum.
        public static let unknownEnumName = Code(.unknownEnumName)
        /// A `bytes` value in JSON is not base64 (standard or URL-safe alphabet).
        public static let invalidBase64 = Code(.invalidBase64)
        /// A JSON object or array with more entries than `JSONDecodingOptions.maximumElements`.
        public static let tooManyElements = Code(.tooManyElements)

        public var description: String { value.rawValue }
    }

    /// The kind of problem.
    public let code: Code
    /// What is wrong, without the field path: `"expected an integer, found a string"`.
    public let message: String
    /// Where: field names joined by `.`, with `[i]` for list elements and `["key"]` for map
    /// entries; empty when the problem is in the outermost message or in the JSON syntax.
    public private(set) var fieldPath: String
    /// The byte offset in the input where the problem was found (binary input and JSON syntax
    /// errors), when known.
    public let offset: Int?

    /// Creates an error; decoders add the field path as the error travels out.
    public init(_ code: Code, _ message: String, fieldPath: String = "", offset: Int? = nil) {
        self.code = code
        self.message = message
        self.fieldPath = fieldPath
        self.offset = offset
    }

    /// `"<fieldPath>: <message>"`, or the message alone when there is no path.
    public var description: String {
        fieldPath.isEmpty ? message : "\(fieldPath): \(message)"
    }

    /// The same error with `component` (a field name, `[3]` or `["key"]`) put in front of its path.
    public func prefixingPath(_ component: String) -> ProtobufError {
        var copy = self
        if copy.fieldPath.isEmpty {
            copy.fieldPath = component
        } else if copy.fieldPath.hasPrefix("[") {
            copy.fieldPath = component + copy.fieldPath
        } else {
            copy.fieldPath = component + "." + copy.fieldPath
        }
        return copy
    }
}
