/// ZigZag encoding of `sint32`/`sint64` (protobuf.dev/programming-guides/encoding, "Signed Integers"):
/// 0 → 0, -1 → 1, 1 → 2, -2 → 3, …
public enum ZigZag {
    /// `(n << 1) ^ (n >> 31)`.
    @inlinable public static func encode(_ value: Int32) -> UInt32 { UInt32(bitPattern: (value << 1) ^ (value >> 31)) }
    /// `(n << 1) ^ (n >> 63)`.
    @inlinable public static func encode(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }
    /// The inverse of ``encode(_:)-(Int32)``.
    @inlinable public static func decode(_ value: UInt32) -> Int32 { Int32(bitPattern: value >> 1) ^ -Int32(bitPattern: value & 1) }
    /// The inverse of ``encode(_:)-(Int64)``.
    @inlinable public static func decode(_ value: UInt64) -> Int64 { Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1) }
}
