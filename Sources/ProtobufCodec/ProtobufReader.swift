/// Reads protobuf wire-format data (protobuf.dev/programming-guides/encoding) from a byte array,
/// checking every length against the end of the enclosing message.
///
/// Every read throws a ``ProtobufError`` (truncated input, malformed varint, invalid wire type,
/// field number 0, length past the end, invalid UTF-8, nesting deeper than 100) instead of
/// trapping; the error's `offset` is the byte where the problem starts.
public struct ProtobufReader: Sendable {
    @usableFromInline let buffer: [UInt8]
    @usableFromInline var position: Int
    @usableFromInline var limit: Int
    @usableFromInline var depth = 0

    /// Messages and groups may nest this deep; deeper input throws `.nestingTooDeep`.
    public static let maximumDepth = 100

    /// A reader over all of `bytes`.
    public init(bytes: [UInt8]) {
        buffer = bytes
        position = 0
        limit = bytes.count
    }

    /// The offset of the next byte to read.
    @inlinable
    public var offset: Int { position }

    /// `true` when the current message (or the input) has no more bytes.
    @inlinable
    public var isAtEnd: Bool { position >= limit }

    // MARK: Raw values

    /// Reads a base-128 varint of at most 10 bytes.
    /// - Throws: `.truncated` when the input ends inside it; `.malformedVarint` when it is longer
    ///   than 10 bytes or overflows 64 bits.
    @inlinable
    public mutating func readVarint() throws(ProtobufError) -> UInt64 {
        if position < limit, buffer[position] < 0x80 {
            let value = UInt64(buffer[position])
            position += 1
            return value
        }
        return try readVarintSlow()
    }

    @usableFromInline
    mutating func readVarintSlow() throws(ProtobufError) -> UInt64 {
        let start = position
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard position < limit else {
                throw ProtobufError(.truncated, "truncated varint", offset: start)
            }
            let byte = buffer[position]
            position += 1
            if shift == 63 && byte > 1 {
                throw ProtobufError(.malformedVarint, "varint longer than 10 bytes or past 64 bits", offset: start)
            }
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
    }

    /// Reads 4 bytes, little-endian.
    /// - Throws: `.truncated` when fewer than 4 bytes remain.
    @inlinable
    public mutating func readFixed32() throws(ProtobufError) -> UInt32 {
        guard limit - position >= 4 else {
            throw ProtobufError(.truncated, "truncated fixed32 value", offset: position)
        }
        let value = UInt32(buffer[position]) | UInt32(buffer[position + 1]) << 8
            | UInt32(buffer[position + 2]) << 16 | UInt32(buffer[position + 3]) << 24
        position += 4
        return value
    }

    /// Reads 8 bytes, little-endian.
    /// - Throws: `.truncated` when fewer than 8 bytes remain.
    @inlinable
    public mutating func readFixed64() throws(ProtobufError) -> UInt64 {
        guard limit - position >= 8 else {
            throw ProtobufError(.truncated, "truncated fixed64 value", offset: position)
        }
        let low = try readFixed32()
        let high = try readFixed32()
        return UInt64(high) << 32 | UInt64(low)
    }

    /// Reads a varint length and returns the range of the bytes it covers, moving past them.
    /// - Throws: `.lengthPastEnd` when the length reaches past the current message.
    @inlinable
    public mutating func readLengthDelimitedRange() throws(ProtobufError) -> Range<Int> {
        let start = position
        let length = try readVarint()
        guard length <= UInt64(limit - position) else {
            throw ProtobufError(.lengthPastEnd, "length \(length) reaches past the end of the message", offset: start)
        }
        let range = position..<(position + Int(length))
        position = range.upperBound
        return range
    }

    /// Reads a length-delimited value and returns a copy of its bytes.
    @inlinable
    public mutating func readLengthDelimitedBytes() throws(ProtobufError) -> [UInt8] {
        let range = try readLengthDelimitedRange()
        return Array(buffer[range])
    }

    /// Reads a length-delimited value as a UTF-8 string.
    /// - Throws: `.invalidUTF8` when the bytes are not valid UTF-8 (proto3 `string` fields must be).
    @inlinable
    public mutating func readLengthDelimitedString() throws(ProtobufError) -> String {
        let range = try readLengthDelimitedRange()
        if range.isEmpty { return "" }
        let string = buffer.withUnsafeBufferPointer { all in
            String(validating: UnsafeBufferPointer(rebasing: all[range]), as: UTF8.self)
        }
        guard let string else {
            throw ProtobufError(.invalidUTF8, "string is not valid UTF-8", offset: range.lowerBound)
        }
        return string
    }

    // MARK: Tags and fields

    /// Reads the next tag, or returns `nil` at the end of the current message.
    /// - Throws: `.invalidWireType` for wire types 6 and 7, `.invalidFieldNumber` for field number
    ///   0 or one past 2^29 - 1, `.unmatchedGroup` for an end-group tag outside a group.
    @inlinable
    public mutating func readTag() throws(ProtobufError) -> FieldTag? {
        guard position < limit else { return nil }
        let start = position
        let raw = try readVarint()
        guard let wireType = WireType(rawValue: UInt8(truncatingIfNeeded: raw & 7)) else {
            throw ProtobufError(.invalidWireType, "invalid wire type \(raw & 7)", offset: start)
        }
        let number = raw >> 3
        guard number != 0 else {
            throw ProtobufError(.invalidFieldNumber, "field number 0", offset: start)
        }
        guard number <= UInt64(FieldTag.maximumNumber) else {
            throw ProtobufError(.invalidFieldNumber, "field number \(number) above 2^29 - 1", offset: start)
        }
        if wireType == .endGroup {
            throw ProtobufError(.unmatchedGroup, "end-group tag for field \(number) outside a group", offset: start)
        }
        return FieldTag(number: Int(number), wireType: wireType)
    }

    /// Skips the value of a field whose tag was just read (groups included, up to their end tag).
    /// - Throws: the errors of the reads it makes; `.unmatchedGroup` for a group that does not end
    ///   with its own end tag.
    public mutating func skipField(_ tag: FieldTag) throws(ProtobufError) {
        switch tag.wireType {
        case .varint: _ = try readVarint()
        case .fixed64: _ = try readFixed64()
        case .fixed32: _ = try readFixed32()
        case .lengthDelimited: _ = try readLengthDelimitedRange()
        case .startGroup:
            depth += 1
            defer { depth -= 1 }
            guard depth <= Self.maximumDepth else {
                throw ProtobufError(.nestingTooDeep, "groups nested deeper than \(Self.maximumDepth)", offset: position)
            }
            while true {
                guard position < limit else {
                    throw ProtobufError(.truncated, "group \(tag.number) has no end-group tag", offset: position)
                }
                let start = position
                let raw = try readVarint()
                if raw & 7 == UInt64(WireType.endGroup.rawValue) {
                    guard raw >> 3 == UInt64(tag.number) else {
                        throw ProtobufError(.unmatchedGroup, "group \(tag.number) ended by the end tag of \(raw >> 3)", offset: start)
                    }
                    return
                }
                position = start
                guard let inner = try readTag() else { continue }
                try skipField(inner)
            }
        case .endGroup:
            throw ProtobufError(.unmatchedGroup, "end-group tag for field \(tag.number) outside a group", offset: position)
        }
    }

    /// Reads the bytes of one field whose tag started at `tagStart` and appends tag and value to
    /// `unknownFields`.
    @inlinable
    public mutating func skipField(_ tag: FieldTag, startingAt tagStart: Int, into unknownFields: inout UnknownFields) throws(ProtobufError) {
        try skipField(tag)
        unknownFields.bytes.append(contentsOf: buffer[tagStart..<position])
    }

    /// Reads a scalar of type `T`, whose tag was just read.
    @inlinable
    public mutating func read<T: ProtobufFieldType>(_ type: T.Type) throws(ProtobufError) -> T.Value {
        try T.read(from: &self)
    }

    /// Reads one occurrence of a repeated scalar field, accepting both the packed form (one
    /// length-delimited record) and the unpacked form (one record per element), as parsers must
    /// (protobuf.dev/programming-guides/encoding, "Packed Repeated Fields").
    /// - Returns: `false`, having read nothing, when the wire type fits neither form.
    @inlinable
    public mutating func readRepeated<T: ProtobufFieldType>(
        _ type: T.Type, tag: FieldTag, into values: inout [T.Value]
    ) throws(ProtobufError) -> Bool {
        if tag.wireType == T.wireType {
            values.append(try T.read(from: &self))
            return true
        }
        guard tag.wireType == .lengthDelimited else { return false }
        let range = try readLengthDelimitedRange()
        let savedLimit = limit
        position = range.lowerBound
        limit = range.upperBound
        while position < limit { values.append(try T.read(from: &self)) }
        limit = savedLimit
        return true
    }

    /// Reads an embedded message (length, then fields) and merges it into `message`, as a
    /// repeated occurrence of a singular message field must (later fields win, lists append).
    /// - Throws: the message's decoding errors; `.nestingTooDeep` past 100 levels.
    @inlinable
    public mutating func readMessage<M: ProtobufMessage>(into message: inout M) throws(ProtobufError) {
        try readEmbedded { (reader: inout ProtobufReader) throws(ProtobufError) in try message.decodeFields(from: &reader) }
    }

    /// Reads a length-delimited field as an embedded message and runs `body` over its fields only,
    /// without decoding it (for a look at the wire before the real decode, such as counting the
    /// entries of a repeated field). Afterwards the reader is past the field.
    /// - Throws: the framing errors of `readLengthDelimitedRange`, `.nestingTooDeep`, and what
    ///   `body` throws.
    @inlinable
    public mutating func readEmbedded<T>(_ body: (inout ProtobufReader) throws(ProtobufError) -> T) throws(ProtobufError) -> T {
        let range = try readLengthDelimitedRange()
        let savedLimit = limit
        position = range.lowerBound
        limit = range.upperBound
        depth += 1
        guard depth <= Self.maximumDepth else {
            throw ProtobufError(.nestingTooDeep, "messages nested deeper than \(Self.maximumDepth)", offset: position)
        }
        let result = try body(&self)
        depth -= 1
        position = range.upperBound
        limit = savedLimit
        return result
    }

    /// Reads one entry of a map field and stores it in `map` (a repeated key replaces the value).
    /// A missing key or value takes its type's default; unknown fields inside the entry are dropped.
    @inlinable
    public mutating func readMapEntry<K: ProtobufMapKeyType, V: ProtobufFieldType>(
        _ keyType: K.Type, _ valueType: V.Type, into map: inout [K.Value: V.Value]
    ) throws(ProtobufError) {
        let range = try readLengthDelimitedRange()
        let savedLimit = limit
        position = range.lowerBound
        limit = range.upperBound
        var key = K.defaultValue
        var value = V.defaultValue
        while let tag = try readTag() {
            switch (tag.number, tag.wireType) {
            case (1, K.wireType): key = try K.read(from: &self)
            case (2, V.wireType): value = try V.read(from: &self)
            default: try skipField(tag)
            }
        }
        limit = savedLimit
        map[key] = value
    }

    /// Reads one entry of a map field whose values are messages.
    @inlinable
    public mutating func readMessageMapEntry<K: ProtobufMapKeyType, M: ProtobufMessage>(
        _ keyType: K.Type, into map: inout [K.Value: M]
    ) throws(ProtobufError) {
        let range = try readLengthDelimitedRange()
        let savedLimit = limit
        position = range.lowerBound
        limit = range.upperBound
        var key = K.defaultValue
        var value = M()
        while let tag = try readTag() {
            switch (tag.number, tag.wireType) {
            case (1, K.wireType): key = try K.read(from: &self)
            case (2, .lengthDelimited): try readMessage(into: &value)
            default: try skipField(tag)
            }
        }
        limit = savedLimit
        map[key] = value
    }
}
