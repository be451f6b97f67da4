/// One-dimensional arrays as query parameters, so that a batch of N rows needs one parameter per
/// column, not N (`unnest($1::text[], $2::bigint[])`, `= ANY($1)`).
///
/// They travel in PostgreSQL's binary array format (the layout of `array_send`/`array_recv`,
/// `src/backend/utils/adt/arrayfuncs.c`; integers big-endian, RFC 1700 network order): the
/// dimension count (1, or 0 for an empty array), a has-nulls flag (always 0: no element is NULL),
/// the element type's OID, the length of the dimension and its lower bound (1), then each element
/// as a 4-byte length and its bytes in the element type's binary format (`text`: its UTF-8 bytes;
/// `bytea`: the bytes themselves; `bigint`/`integer`: 8 or 4 bytes, two's complement). The server
/// neither parses quoting nor decodes hex, which a text literal (`{"a","b"}`, `{"\\x0a"}`) made it
/// do for every element.
extension PostgresValue {
    /// A `text[]`. The strings must not contain U+0000, which PostgreSQL text cannot store: a
    /// statement given one fails before it is sent (SQLSTATE 22021, naming the parameter).
    public static func textArray(_ values: some Sequence<String>) -> PostgresValue {
        var array = BinaryArray(elementOID: PostgresTypeOID.text)
        var containsNUL = false
        for value in values {
            if !containsNUL, value.utf8.contains(0) { containsNUL = true }
            array.append(value.utf8)
        }
        return PostgresValue(binary: array.finish(), typeOID: PostgresTypeOID.textArray, textContainsNUL: containsNUL)
    }

    /// A `bigint[]` (int8).
    public static func int64Array(_ values: some Sequence<Int64>) -> PostgresValue {
        var array = BinaryArray(elementOID: PostgresTypeOID.int8)
        for value in values { array.append(bigEndian: value) }
        return PostgresValue(binary: array.finish(), typeOID: PostgresTypeOID.int8Array)
    }

    /// An `integer[]` (int4).
    public static func int32Array(_ values: some Sequence<Int32>) -> PostgresValue {
        var array = BinaryArray(elementOID: PostgresTypeOID.int4)
        for value in values { array.append(bigEndian: value) }
        return PostgresValue(binary: array.finish(), typeOID: PostgresTypeOID.int4Array)
    }

    /// A `bytea[]`: every byte of every element, NUL included, arrives unchanged.
    public static func byteaArray(_ values: some Sequence<[UInt8]>) -> PostgresValue {
        var array = BinaryArray(elementOID: PostgresTypeOID.bytea)
        for value in values { array.append(value) }
        return PostgresValue(binary: array.finish(), typeOID: PostgresTypeOID.byteaArray)
    }
}

/// The encoder of a one-dimensional array without NULLs in binary format (see the extension above).
struct BinaryArray {
    private var bytes: [UInt8] = []
    private var count: Int32 = 0
    private let elementOID: UInt32

    /// The offset of the dimension's length in the header, written by `finish()`.
    private static let dimensionOffset = 12
    private static let headerSize = 20

    init(elementOID: UInt32) {
        self.elementOID = elementOID
        bytes.reserveCapacity(256)
        bytes.append(contentsOf: repeatElement(0, count: Self.headerSize))
    }

    /// Appends one element: its length, then its bytes.
    mutating func append(_ element: some Collection<UInt8>) {
        appendLength(element.count)
        bytes.append(contentsOf: element)
        count += 1
    }

    /// Appends one fixed-width integer element (its length, then its bytes, big-endian).
    mutating func append<T: FixedWidthInteger>(bigEndian value: T) where T: SignedInteger {
        appendLength(MemoryLayout<T>.size)
        appendRaw(value)
        count += 1
    }

    /// Appends an element's length in bytes as the format's 4-byte field.
    private mutating func appendLength(_ length: Int) { appendRaw(Int32(length)) }

    private mutating func appendRaw<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// The encoded array: the header written, or the 12-byte header of an empty array (no dimension).
    consuming func finish() -> [UInt8] {
        var header: [UInt8] = []
        header.reserveCapacity(Self.headerSize)
        let dimensions: Int32 = count == 0 ? 0 : 1
        for field in [dimensions, 0, Int32(bitPattern: elementOID), count, 1] {
            withUnsafeBytes(of: field.bigEndian) { header.append(contentsOf: $0) }
        }
        if count == 0 { return Array(header[0..<Self.dimensionOffset]) }
        bytes.replaceSubrange(0..<Self.headerSize, with: header)
        return bytes
    }
}
