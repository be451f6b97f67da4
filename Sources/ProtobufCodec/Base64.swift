/// The project's one base64 (RFC 4648), without Foundation: the standard alphabet (§4, `+` `/`) that
/// proto3 JSON writes `bytes` fields in, and the URL alphabet (§5, `-` `_`) of JWS (RFC 7515 §2), API
/// keys and collapse ids.
public enum Base64 {
    /// Which characters stand for 62 and 63.
    public enum Alphabet: Sendable {
        /// `+` and `/` (RFC 4648 §4).
        case standard
        /// `-` and `_` (RFC 4648 §5).
        case url
        /// Either pair, as proto3 JSON parsers accept.
        case either
    }

    private static let standardCharacters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let urlCharacters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Standard alphabet with `=` padding, as proto3 JSON writes bytes.
    public static func encode(_ bytes: [UInt8]) -> String { encode(bytes, alphabet: standardCharacters, padded: true) }

    /// URL alphabet without padding, as JWS writes each part: 4 characters per 3 bytes, 2 or 3 for a
    /// final 1 or 2 bytes (16 bytes → 22 characters).
    public static func encodeURL(_ bytes: [UInt8]) -> String { encode(bytes, alphabet: urlCharacters, padded: false) }

    private static func encode(_ bytes: [UInt8], alphabet: [UInt8], padded: Bool) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= bytes.count {
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out.append(alphabet[Int(value >> 18 & 63)])
            out.append(alphabet[Int(value >> 12 & 63)])
            out.append(alphabet[Int(value >> 6 & 63)])
            out.append(alphabet[Int(value & 63)])
            index += 3
        }
        let rest = bytes.count - index
        if rest > 0 {
            var value = UInt32(bytes[index]) << 16
            if rest == 2 { value |= UInt32(bytes[index + 1]) << 8 }
            out.append(alphabet[Int(value >> 18 & 63)])
            out.append(alphabet[Int(value >> 12 & 63)])
            if rest == 2 { out.append(alphabet[Int(value >> 6 & 63)]) } else if padded { out.append(UInt8(ascii: "=")) }
            if padded { out.append(UInt8(ascii: "=")) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes standard or URL-safe base64, padded or not.
    /// - Throws: `ProtobufError` `.invalidBase64` naming the offending character or length.
    public static func decode(_ string: String) throws(ProtobufError) -> [UInt8] {
        switch decoding(Array(string.utf8), alphabet: .either) {
        case .success(let bytes): return bytes
        case .failure(let problem): throw ProtobufError(.invalidBase64, "invalid base64: \(problem.message)")
        }
    }

    /// Decodes `text` in `alphabet`, with or without `=` padding; nil when it is not base64 of that alphabet.
    public static func decode(_ text: some StringProtocol, alphabet: Alphabet) -> [UInt8]? {
        try? decoding(Array(text.utf8), alphabet: alphabet).get()
    }

    /// Decodes UTF-8 `input` in `alphabet`, with or without `=` padding; nil when it is not base64 of that alphabet.
    public static func decode(_ input: [UInt8], alphabet: Alphabet) -> [UInt8]? {
        try? decoding(input, alphabet: alphabet).get()
    }

    private struct Problem: Error { let message: String }

    private static func decoding(_ text: [UInt8], alphabet: Alphabet) -> Result<[UInt8], Problem> {
        var input = text
        while input.last == UInt8(ascii: "=") { input.removeLast() }
        guard input.count % 4 != 1, text.count - input.count <= 2 else { return .failure(Problem(message: "bad length \(text.count)")) }
        let standard = alphabet != .url
        let url = alphabet != .standard
        var out: [UInt8] = []
        out.reserveCapacity(input.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for (offset, char) in input.enumerated() {
            let value: UInt32
            switch char {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = UInt32(char - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = UInt32(char - UInt8(ascii: "a")) + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = UInt32(char - UInt8(ascii: "0")) + 52
            case UInt8(ascii: "+") where standard, UInt8(ascii: "-") where url: value = 62
            case UInt8(ascii: "/") where standard, UInt8(ascii: "_") where url: value = 63
            default: return .failure(Problem(message: "unexpected character at offset \(offset)"))
            }
            accumulator = accumulator << 6 | value
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        return .success(out)
    }
}
