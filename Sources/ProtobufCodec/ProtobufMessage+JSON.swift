/// Proto3 JSON entry points (protobuf.dev/programming-guides/json).
extension ProtobufMessage {
    /// Decodes a message from proto3 JSON. Field keys may be the lowerCamelCase JSON name or the
    /// `.proto` name; `null` means the default; 64-bit integers may be strings or numbers; enums
    /// names or numbers; bytes base64.
    /// - Throws: `ProtobufError` whose description names the field path, such as
    ///   `notification.priority: expected an integer, found a string`.
    public init(jsonUTF8 bytes: [UInt8], options: JSONDecodingOptions = JSONDecodingOptions()) throws(ProtobufError) {
        self = try JSONValue(parsing: bytes, maximumElements: options.maximumElements).decodeMessage(Self.self, options: options)
    }

    /// Decodes a message from proto3 JSON held in any byte collection (such as `Data`).
    /// - Throws: as ``init(jsonUTF8:options:)-([UInt8],_)``.
    public init(jsonUTF8 bytes: some Collection<UInt8>, options: JSONDecodingOptions = JSONDecodingOptions()) throws(ProtobufError) {
        try self.init(jsonUTF8: Array(bytes), options: options)
    }

    /// Decodes a message from proto3 JSON text.
    /// - Throws: as ``init(jsonUTF8:options:)-([UInt8],_)``.
    public init(jsonString: String, options: JSONDecodingOptions = JSONDecodingOptions()) throws(ProtobufError) {
        try self.init(jsonUTF8: Array(jsonString.utf8), options: options)
    }

    /// The message as compact proto3 JSON (UTF-8): default values omitted, 64-bit integers as
    /// strings, enums by name, bytes as base64, map keys in ascending order.
    public func jsonUTF8Bytes(options: JSONEncodingOptions = JSONEncodingOptions()) -> [UInt8] {
        var writer = JSONWriter(options: options)
        writer.writeMessageValue(self)
        return writer.bytes
    }

    /// The message as compact proto3 JSON text; see ``jsonUTF8Bytes(options:)``.
    public func jsonString(options: JSONEncodingOptions = JSONEncodingOptions()) -> String {
        String(decoding: jsonUTF8Bytes(options: options), as: UTF8.self)
    }
}
