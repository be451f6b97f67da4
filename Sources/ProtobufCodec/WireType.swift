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
