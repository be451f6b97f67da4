/// The wire type in the low 3 bits of every tag (protobuf.dev/programming-guides/encoding,
/// "Message Structure"). Values 6 and 7 are invalid.
public enum WireType: UInt8, Sendable, Hashable {
    /// int32, int64, uint32, uint64, sint32, sint64, bool, enum.
    case varint = 0
    /// fixed64, sfixed64, double: 8 bytes, little-endian.
    case fixed64 = 1
    /// string, bytes, embedded messages, packed repeated fields: a varint length, then that many bytes.
    case lengthDelimited = 2
    /// Proto2 group start (deprecated); skipped as an unknown field.
    case startGroup = 3
    /// Proto2 group end (deprecated).
    case endGroup = 4
    /// fixed32, sfixed32, float: 4 bytes, little-endian.
    case fixed32 = 5
}

/// One field's tag: its number and wire type.
public struct FieldTag: Sendable, Hashable {
    /// The field number, 1 to 2^29 - 1.
    public let number: Int
    /// How the value that follows is encoded.
    public let wireType: WireType

    /// The largest field number a `.proto` file may use: 2^29 - 1.
    public static let maximumNumber = (1 << 29) - 1

    /// A tag for field `number`, which must be in 1...``maximumNumber``.
    @inlinable
    public init(number: Int, wireType: WireType) {
        self.number = number
        self.wireType = wireType
    }

    /// The tag as it is written: `number << 3 | wireType`.
    @inlinable
    public var encoded: UInt32 { UInt32(truncatingIfNeeded: number) << 3 | UInt32(wireType.rawValue) }
}

/// Fields a message did not recognise when it was decoded, kept as their exact wire bytes (tag
/// included, in arrival order) and written back after the known fields when it is encoded, so that
/// a service on an older contract forwards what a newer producer wrote.
public struct UnknownFields: Sendable, Hashable {
    /// The raw fields, each a tag followed by its value.
    public var bytes: [UInt8]

    /// No unknown fields.
    @inlinable
    public init() { bytes = [] }

    /// `bytes` must be whole fields (tag and value); they are written out verbatim.
    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// `true` when no unknown field was kept.
    @inlinable
    public var isEmpty: Bool { bytes.isEmpty }
}
