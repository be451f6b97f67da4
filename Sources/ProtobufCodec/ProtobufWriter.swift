/// Appends protobuf wire-format data to a byte buffer (protobuf.dev/programming-guides/encoding).
///
/// Generated `encodeFields(to:)` methods call the typed `write…` methods; nested messages are
/// written with a one-byte length placeholder that is widened in place when the message turns out
/// to be 128 bytes or longer, so no message is encoded twice. No Foundation on this path.
public struct ProtobufWriter: Sendable {
    @usableFromInline var buffer: [UInt8]

    /// The bytes written so far.
    public var bytes: [UInt8] { buffer }

    /// An empty writer whose buffer has room for `capacity` bytes before it grows.
    public init(reservingCapacity capacity: Int = 128) {
        buffer = []
        buffer.reserveCapacity(capacity)
    }

    // MARK: Raw values

    /// Appends `value` as a base-128 varint: 1 to 10 bytes, least significant group first.
    @inlinable
    public mutating func writeVarint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            buffer.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        buffer.append(UInt8(truncatingIfNeeded: value))
    }

    /// Appends a tag: `number << 3 | wireType` as a varint.
    @inlinable
    public mutating func writeTag(number: Int, wireType: WireType) {
        writeVarint(UInt64(FieldTag(number: number, wireType: wireType).encoded))
    }

    /// Appends 4 bytes, little-endian.
    @inlinable
    public mutating func writeFixed32(_ value: UInt32) {
        buffer.append(UInt8(truncatingIfNeeded: value))
        buffer.append(UInt8(truncatingIfNeeded: value >> 8))
        buffer.append(UInt8(truncatingIfNeeded: value >> 16))
        buffer.append(UInt8(truncatingIfNeeded: value >> 24))
    }

    /// Appends 8 bytes, little-endian.
    @inlinable
    public mutating func writeFixed64(_ value: UInt64) {
        writeFixed32(UInt32(truncatingIfNeeded: value))
        writeFixed32(UInt32(truncatingIfNeeded: value >> 32))
    }

    /// Appends `raw` unchanged.
    @inlinable
    public mutating func writeRawBytes(_ raw: some Collection<UInt8>) {
        buffer.append(contentsOf: raw)
    }

    /// Appends a varint length followed by the content of `string` as UTF-8.
    @inlinable
    public mutating func writeLengthPrefixed(_ string: String) {
        let utf8 = string.utf8
        writeVarint(UInt64(utf8.count))
        buffer.append(contentsOf: utf8)
    }

    /// Appends a varint length followed by `raw`.
    @inlinable
    public mutating func writeLengthPrefixed(_ raw: [UInt8]) {
        writeVarint(UInt64(raw.count))
        buffer.append(contentsOf: raw)
    }

    /// Appends whatever `body` writes, preceded by its length as a varint (no tag).
    @inlinable
    public mutating func writeLengthPrefixed(_ body: (inout ProtobufWriter) -> Void) {
        buffer.append(0)
        let start = buffer.count
        body(&self)
        let length = buffer.count - start
        if length < 0x80 {
            buffer[start - 1] = UInt8(truncatingIfNeeded: length)
            return
        }
        var size = 1
        var rest = length >> 7
        while rest > 0 { size += 1; rest >>= 7 }
        buffer.insert(contentsOf: repeatElement(0, count: size - 1), at: start)
        var value = length
        var index = start - 1
        while value >= 0x80 {
            buffer[index] = UInt8(truncatingIfNeeded: value) | 0x80
            value >>= 7
            index += 1
        }
        buffer[index] = UInt8(truncatingIfNeeded: value)
    }

    // MARK: Fields

    /// Appends field `number`: its tag and `value`, always (callers skip proto3 defaults).
    @inlinable
    public mutating func writeField<T: ProtobufFieldType>(_ type: T.Type, _ value: T.Value, number: Int) {
        writeTag(number: number, wireType: T.wireType)
        T.write(value, to: &self)
    }

    /// Appends a repeated scalar field: packed (one length-delimited record) for numeric types,
    /// one record per element for strings and bytes or when `packed` is false. Writes nothing for
    /// an empty list.
    @inlinable
    public mutating func writeRepeated<T: ProtobufFieldType>(
        _ type: T.Type, _ values: [T.Value], number: Int, packed: Bool = true
    ) {
        guard !values.isEmpty else { return }
        if packed && T.wireType != .lengthDelimited {
            writeTag(number: number, wireType: .lengthDelimited)
            writeLengthPrefixed { writer in
                for value in values { T.write(value, to: &writer) }
            }
        } else {
            for value in values { writeField(T.self, value, number: number) }
        }
    }

    /// Appends an embedded message field: tag, length, then the message's fields.
    @inlinable
    public mutating func writeMessage<M: ProtobufMessage>(_ message: M, number: Int) {
        writeTag(number: number, wireType: .lengthDelimited)
        writeLengthPrefixed { writer in message.encodeFields(to: &writer) }
    }

    /// Appends each message of a repeated message field.
    @inlinable
    public mutating func writeRepeatedMessages<M: ProtobufMessage>(_ messages: [M], number: Int) {
        for message in messages { writeMessage(message, number: number) }
    }

    /// Appends a map field: one entry message (key = 1, value = 2) per pair, in ascending key
    /// order so the encoding is deterministic. Key and value are always written.
    @inlinable
    public mutating func writeMap<K: ProtobufMapKeyType, V: ProtobufFieldType>(
        _ keyType: K.Type, _ valueType: V.Type, _ map: [K.Value: V.Value], number: Int
    ) {
        for key in map.keys.sorted(by: K.precedes) {
            writeTag(number: number, wireType: .lengthDelimited)
            writeLengthPrefixed { writer in
                writer.writeField(K.self, key, number: 1)
                writer.writeField(V.self, map[key]!, number: 2)
            }
        }
    }

    /// Appends a map field whose values are messages, in ascending key order.
    @inlinable
    public mutating func writeMessageMap<K: ProtobufMapKeyType, M: ProtobufMessage>(
        _ keyType: K.Type, _ map: [K.Value: M], number: Int
    ) {
        for key in map.keys.sorted(by: K.precedes) {
            writeTag(number: number, wireType: .lengthDelimited)
            writeLengthPrefixed { writer in
                writer.writeField(K.self, key, number: 1)
                writer.writeMessage(map[key]!, number: 2)
            }
        }
    }

    /// Appends fields kept from decoding, verbatim.
    @inlinable
    public mutating func writeUnknownFields(_ fields: UnknownFields) {
        buffer.append(contentsOf: fields.bytes)
    }
}
