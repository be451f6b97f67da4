/// A parsed JSON document (RFC 8259), as the proto3 JSON decoder consumes it.
///
/// Numbers keep their literal text, so 64-bit integers are never rounded through `Double`; strings
/// are the exact decoded text (escapes resolved, nothing else changed), so a `payload` field
/// holding JSON text survives byte for byte. Object members keep their order and duplicates.
public indirect enum JSONValue: Sendable, Hashable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number, as its literal text (`-12`, `1.5e3`).
    case number(String)
    /// A string, escapes resolved.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object.
    case object(JSONObject)

    /// Parses one JSON document (UTF-8, optional surrounding whitespace).
    /// - Throws: `ProtobufError` `.invalidJSON` with the byte offset, `.invalidUTF8`, or
    ///   `.nestingTooDeep` past 100 levels.
    /// - Parameter maximumElements: most members of one object or elements of one array; past it
    ///   parsing stops with `.tooManyElements` (a bound on what hostile input can make it allocate).
    public init(parsing bytes: [UInt8], maximumElements: Int = .max) throws(ProtobufError) {
        var parser = JSONParser(bytes: bytes, maximumElements: maximumElements)
        self = try parser.parseDocument()
    }

    /// `true` for `null`.
    @inlinable
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// What kind of value this is, for error messages: "a string", "an object", …
    public var kindDescription: String {
        switch self {
        case .null: "null"
        case .bool(let value): value ? "true" : "false"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// Whether `text` is a JSON number literal: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    public static func isNumberLiteral(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var parser = JSONParser(bytes: bytes)
        guard (try? parser.scanNumber()) != nil else { return false }
        return parser.position == bytes.count
    }
}
