/// Reading values out of a parsed document, for callers that inspect JSON (APNs payloads and error
/// bodies, JWT headers and claims) rather than decode a message.
extension JSONObject {
    /// The value of the last member named `key` (in a document with duplicate keys the last one wins,
    /// as most JSON readers do); nil when there is none.
    public subscript(key: String) -> JSONValue? {
        members.last { $0.key == key }?.value
    }
}

extension JSONValue {
    /// The integer value of a number written with no fraction or exponent, if it fits `Int64`
    /// (`1` → 1; `1.0`, `1e0`, `"1"` → nil): how a JWT's `iat` must be written.
    public var integerValue: Int64? {
        guard case .number(let text) = self, !text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }) else { return nil }
        return Int64(text)
    }

    /// `text` as a JSON string literal, quotes included, escaped as ``JSONWriter`` escapes strings.
    public static func quote(_ text: String) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count + 2)
        JSONWriter.appendQuoted(text, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}
