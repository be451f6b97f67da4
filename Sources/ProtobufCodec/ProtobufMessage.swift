/// A protobuf message in Swift. Generated types (from `scripts/protoc-gen-swiftpush`) implement the
/// four requirements; the binary and JSON entry points come from extensions.
///
/// Decoding keeps fields it does not know in ``unknownFields`` and encoding writes them back after
/// the known fields, so a message passes through an older service intact.
public protocol ProtobufMessage: Sendable, Hashable {
    /// The full protobuf name, such as `push.v1.SendRequest` (for content-type headers and errors).
    static var protoMessageName: String { get }
    /// A message with every field at its default.
    init()
    /// Fields seen when decoding that this type does not know, as raw wire bytes.
    var unknownFields: UnknownFields { get set }
    /// Decodes the value of one field whose tag was just read.
    /// - Returns: `false`, having read nothing, when `tag` is not one of this message's fields
    ///   (unknown number, or a wire type that does not fit the field).
    /// - Throws: `ProtobufError` with the field's name in front of its path.
    mutating func decodeField(_ tag: FieldTag, from reader: inout ProtobufReader) throws(ProtobufError) -> Bool
    /// Appends every non-default field, in field-number order, then ``unknownFields``.
    func encodeFields(to writer: inout ProtobufWriter)
    /// Sets the fields named in a JSON object (protobuf.dev/programming-guides/json).
    /// - Throws: `ProtobufError` naming the field path.
    mutating func decodeJSONObject(_ object: JSONObject, options: JSONDecodingOptions) throws(ProtobufError)
    /// Appends every non-default field as members of the JSON object the writer is in.
    func encodeJSONFields(to writer: inout JSONWriter)
}

extension ProtobufMessage {
    /// Decodes a message from its binary encoding.
    /// - Throws: `ProtobufError` (truncated input, malformed varint, invalid wire type, field
    ///   number 0, length past the end, invalid UTF-8, …) naming the field path and byte offset.
    @inlinable
    public init(protobufBytes bytes: [UInt8]) throws(ProtobufError) {
        self.init()
        try merge(protobufBytes: bytes)
    }

    /// Decodes a message from its binary encoding held in any byte collection (such as `Data`).
    /// - Throws: as ``init(protobufBytes:)-([UInt8])``.
    @inlinable
    public init(protobufBytes bytes: some Collection<UInt8>) throws(ProtobufError) {
        try self.init(protobufBytes: Array(bytes))
    }

    /// Merges an encoded message into this one: singular fields present in `bytes` replace
    /// values, repeated fields append, embedded messages merge (protobuf.dev, "Merging").
    /// - Throws: as ``init(protobufBytes:)-([UInt8])``; `self` may then be partly merged.
    @inlinable
    public mutating func merge(protobufBytes bytes: [UInt8]) throws(ProtobufError) {
        var reader = ProtobufReader(bytes: bytes)
        try decodeFields(from: &reader)
    }

    /// Decodes fields until the reader's current message ends, keeping unknown ones.
    @inlinable
    public mutating func decodeFields(from reader: inout ProtobufReader) throws(ProtobufError) {
        while true {
            let start = reader.offset
            guard let tag = try reader.readTag() else { return }
            if try !decodeField(tag, from: &reader) {
                try reader.skipField(tag, startingAt: start, into: &unknownFields)
            }
        }
    }

    /// The Kafka `content-type` header value for this message's binary encoding (docs/semantics.md, "Wire
    /// contracts"): `application/x-protobuf; message=push.v1.SendRequest`.
    public static var protobufContentType: String { "application/x-protobuf; message=\(protoMessageName)" }

    /// The binary encoding: fields in number order, proto3 defaults omitted, map entries in key
    /// order, unknown fields last.
    @inlinable
    public func serializedBytes() -> [UInt8] {
        var writer = ProtobufWriter()
        encodeFields(to: &writer)
        return writer.bytes
    }
}
