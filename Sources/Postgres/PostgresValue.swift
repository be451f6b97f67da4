import Foundation
import ServiceCore

/// A query parameter: its encoding for the wire and the type it declares to the server.
///
/// Values travel separately from the SQL text (extended query protocol, `PQexecParams`), so no
/// value is ever spliced into a statement. Text values declare no type (OID 0) so the server infers
/// it from the context (`text`, `varchar`, `jsonb`, an enum…); the other constructors declare theirs.
/// `nil` in a parameter array is SQL `NULL`.
///
/// Literals work directly: `try await connection.query("… $1, $2, $3", ["text", 42, true, nil])`.
public struct PostgresValue: Sendable, Hashable {
    /// Parameter type OID; 0 lets the server infer it.
    let typeOID: UInt32
    /// The encoded value.
    let bytes: [UInt8]
    /// `true` for PostgreSQL's binary format, `false` for its text format.
    let isBinary: Bool
    /// Whether text the server would receive holds U+0000, which PostgreSQL text cannot store: a text
    /// value's bytes, or an element of a `text[]`.
    let textContainsNUL: Bool

    private init(text: String, typeOID: UInt32) {
        self.typeOID = typeOID
        self.bytes = Array(text.utf8)
        self.isBinary = false
        self.textContainsNUL = bytes.contains(0)
    }

    init(binary: [UInt8], typeOID: UInt32, textContainsNUL: Bool = false) {
        self.typeOID = typeOID
        self.bytes = binary
        self.isBinary = true
        self.textContainsNUL = textContainsNUL
    }

    /// A text value; the server infers its type from where `$n` appears (OID 0, "unknown").
    /// The string must not contain U+0000, which PostgreSQL text cannot store (the server rejects it).
    public static func string(_ value: String) -> PostgresValue { PostgresValue(text: value, typeOID: 0) }

    /// A `bigint` (int8).
    public static func int64(_ value: Int64) -> PostgresValue { PostgresValue(text: String(value), typeOID: PostgresTypeOID.int8) }

    /// A `bigint` (int8).
    public static func int(_ value: Int) -> PostgresValue { int64(Int64(value)) }

    /// An `integer` (int4).
    public static func int32(_ value: Int32) -> PostgresValue { PostgresValue(text: String(value), typeOID: PostgresTypeOID.int4) }

    /// A `boolean`.
    public static func bool(_ value: Bool) -> PostgresValue { PostgresValue(text: value ? "t" : "f", typeOID: PostgresTypeOID.bool) }

    /// A `double precision` (float8); infinities and NaN included.
    public static func double(_ value: Double) -> PostgresValue {
        let text: String
        if value.isNaN { text = "NaN" } else if value == .infinity { text = "Infinity" } else if value == -.infinity { text = "-Infinity" } else { text = "\(value)" }
        return PostgresValue(text: text, typeOID: PostgresTypeOID.float8)
    }

    /// A `bytea`, sent in binary format: every byte, NUL included, arrives unchanged.
    public static func bytes(_ value: [UInt8]) -> PostgresValue { PostgresValue(binary: value, typeOID: PostgresTypeOID.bytea) }

    /// A `timestamp with time zone` at `milliseconds` since 1970-01-01T00:00:00Z (years 1–9999).
    public static func timestamp(milliseconds: Int64) -> PostgresValue {
        PostgresValue(text: PostgresTimestamp.format(milliseconds: milliseconds), typeOID: PostgresTypeOID.timestamptz)
    }

    /// A `timestamp with time zone`, rounded down to whole milliseconds.
    public static func timestamp(_ date: Date) -> PostgresValue {
        timestamp(milliseconds: Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))
    }

    /// A `uuid`.
    public static func uuid(_ value: UUID) -> PostgresValue { PostgresValue(text: value.lowercasedString, typeOID: PostgresTypeOID.uuid) }

    /// A `jsonb` value from its JSON text (sent as is, never re-serialized).
    public static func jsonb(_ json: String) -> PostgresValue { PostgresValue(text: json, typeOID: PostgresTypeOID.jsonb) }
}

extension PostgresValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral, ExpressibleByFloatLiteral {
    /// A text literal, as `.string(_:)`.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An integer literal, as `.int64(_:)`.
    public init(integerLiteral value: Int64) { self = .int64(value) }
    /// A boolean literal, as `.bool(_:)`.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// A floating-point literal, as `.double(_:)`.
    public init(floatLiteral value: Double) { self = .double(value) }
}

/// Built-in type OIDs (PostgreSQL 15 `pg_type.dat`).
enum PostgresTypeOID {
    static let bool: UInt32 = 16
    static let bytea: UInt32 = 17
    static let name: UInt32 = 19
    static let int8: UInt32 = 20
    static let int2: UInt32 = 21
    static let int4: UInt32 = 23
    static let text: UInt32 = 25
    static let oid: UInt32 = 26
    static let json: UInt32 = 114
    static let float4: UInt32 = 700
    static let float8: UInt32 = 701
    static let unknown: UInt32 = 705
    static let bpchar: UInt32 = 1042
    static let varchar: UInt32 = 1043
    static let date: UInt32 = 1082
    static let timestamp: UInt32 = 1114
    static let timestamptz: UInt32 = 1184
    static let numeric: UInt32 = 1700
    static let uuid: UInt32 = 2950
    static let jsonb: UInt32 = 3802
    static let byteaArray: UInt32 = 1001
    static let int4Array: UInt32 = 1007
    static let textArray: UInt32 = 1009
    static let int8Array: UInt32 = 1016

    /// The SQL name of well-known types, for error messages.
    static func name(of oid: UInt32) -> String {
        switch oid {
        case bool: "boolean"
        case bytea: "bytea"
        case name: "name"
        case int8: "bigint"
        case int2: "smallint"
        case int4: "integer"
        case text: "text"
        case oid: "oid"
        case json: "json"
        case float4: "real"
        case float8: "double precision"
        case unknown: "unknown"
        case bpchar: "character"
        case varchar: "character varying"
        case date: "date"
        case timestamp: "timestamp without time zone"
        case timestamptz: "timestamp with time zone"
        case numeric: "numeric"
        case uuid: "uuid"
        case jsonb: "jsonb"
        case byteaArray: "bytea[]"
        case int4Array: "integer[]"
        case textArray: "text[]"
        case int8Array: "bigint[]"
        default: "type oid \(oid)"
        }
    }
}
