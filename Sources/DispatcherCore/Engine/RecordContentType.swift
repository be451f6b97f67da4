import Kafka

/// A record's `content-type` header, parsed once (docs/contracts.md "Scheduling and cancelling", its content-type table): the media type
/// and its `message=` parameter, the protobuf message the value holds
/// (`application/x-protobuf; message=push.v1.SendRequest`). Parsing works on the header's bytes; no
/// locale-aware string search runs per record.
struct RecordContentType: Sendable, Equatable {
    /// The header as sent ("" when absent), for error messages.
    let text: String
    /// The media type, lowercased, without parameters ("" when absent).
    let mediaType: String
    /// The `message` parameter's value as sent (case kept: message names are case-sensitive), or nil.
    let message: String?

    /// Parses `header` (nil: the record has no `content-type`).
    init(_ header: [UInt8]?) {
        let bytes = header ?? []
        text = String(decoding: bytes, as: UTF8.self)
        var parts = bytes.split(separator: UInt8(ascii: ";"), omittingEmptySubsequences: false).makeIterator()
        mediaType = Self.trimmed(parts.next() ?? []).lowercased()
        var message: String?
        while let part = parts.next() {
            guard let equals = part.firstIndex(of: UInt8(ascii: "=")) else { continue }
            if Self.trimmed(part[..<equals]).lowercased() == "message" {
                message = Self.trimmed(part[part.index(after: equals)...])
            }
        }
        self.message = message
    }

    /// Reads the header of `message`.
    init(of record: KafkaMessage) {
        self.init(record.header("content-type"))
    }

    /// Whether the header is absent or empty.
    var isEmpty: Bool { text.isEmpty }
    /// Whether the media type is `application/json`.
    var isJSON: Bool { mediaType == "application/json" }
    /// Whether the media type is `application/x-protobuf`.
    var isProtobuf: Bool { mediaType == "application/x-protobuf" }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> String {
        let space: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        guard let first = bytes.firstIndex(where: { !space($0) }), let last = bytes.lastIndex(where: { !space($0) }) else { return "" }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}
