/// An APNs device token: 32 to 256 bytes, held as lowercase hex.
///
/// Normalization follows docs/semantics.md "Device tokens": hex in any case, optionally inside `<…>` and with
/// spaces (the `NSData` description format), even length, 64 to 512 hex characters. Apple says token
/// length is variable ("Don't make assumptions about device token size", docs/apns-protocol.md §2), so
/// anything in that range is accepted; anything else is refused with an error that says what is wrong,
/// never repaired. The same rule serves the registration service, the dispatcher and the simulator.
public struct DeviceToken: Hashable, Sendable, CustomStringConvertible {
    /// Fewest hex characters accepted (32 bytes, today's usual token).
    public static let minimumHexLength = 64
    /// Most hex characters accepted (256 bytes).
    public static let maximumHexLength = 512

    /// The token as lowercase hex, as stored and sent in `:path /3/device/<hex>`.
    public let hex: String

    /// Validates and normalizes `input`.
    /// - Parameter input: the token as an app reported it, e.g. `"<A1B2 C3D4 …>"` or `"a1b2c3d4…"`.
    /// - Throws: `PushDomainError` with reason `BadDeviceToken` when the input
    ///   is empty, has an unmatched `<` or `>`, contains a non-hex character (its 1-based position is
    ///   named), has an odd number of hex digits, or is shorter than 64 or longer than 512 hex digits.
    public init(validating input: String) throws(PushDomainError) {
        func fail(_ message: String) -> PushDomainError {
            PushDomainError("device token \(message)", apnsReason: "BadDeviceToken")
        }
        let utf8 = Array(input.utf8)
        var start = 0
        var end = utf8.count
        while start < end, utf8[start] == 0x20 { start += 1 }
        while end > start, utf8[end - 1] == 0x20 { end -= 1 }
        let opens = start < end && utf8[start] == UInt8(ascii: "<")
        let closes = start < end && utf8[end - 1] == UInt8(ascii: ">")
        if opens || closes {
            guard opens, closes, end - start >= 2 else {
                throw fail(opens ? "has '<' without a closing '>'" : "has '>' without an opening '<'")
            }
            start += 1
            end -= 1
        }
        var hex: [UInt8] = []
        hex.reserveCapacity(end - start)
        for offset in start..<end {
            let byte = utf8[offset]
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): hex.append(byte)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): hex.append(byte | 0x20)
            case 0x20: continue
            default:
                // Name the character and its 1-based position in `input`, counted in characters.
                let index = input.utf8.index(input.utf8.startIndex, offsetBy: offset)
                let position = input[..<index].count + 1
                throw fail("has a non-hex character \(Self.quoted(input[index...].first!)) at position \(position)")
            }
        }
        let count = hex.count
        guard count > 0 else { throw fail("is empty") }
        guard count % 2 == 0 else {
            throw fail("has an odd number of hex digits (\(count)); each byte needs two")
        }
        guard count >= Self.minimumHexLength else {
            throw fail("is too short: \(count) hex digits (\(count / 2) bytes), at least \(Self.minimumHexLength) (32 bytes) required")
        }
        guard count <= Self.maximumHexLength else {
            throw fail("is too long: \(count) hex digits (\(count / 2) bytes), at most \(Self.maximumHexLength) (256 bytes) allowed")
        }
        self.hex = String(decoding: hex, as: UTF8.self)
    }

    /// Creates a token from its raw bytes.
    /// - Throws: `PushDomainError` (`BadDeviceToken`) unless `bytes` holds 32 to 256 bytes.
    public init(bytes: [UInt8]) throws(PushDomainError) {
        let digits: [Character] = Array("0123456789abcdef")
        var hex = ""
        hex.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0F)])
        }
        try self.init(validating: hex)
    }

    /// The token's bytes (32 to 256).
    public var bytes: [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8 = 0
        for (index, digit) in hex.utf8.enumerated() {
            let value = digit <= UInt8(ascii: "9") ? digit &- UInt8(ascii: "0") : digit &- UInt8(ascii: "a") &+ 10
            if index % 2 == 0 { high = value } else { result.append(high << 4 | value) }
        }
        return result
    }

    /// The lowercase hex.
    public var description: String { hex }

    private static func quoted(_ character: Character) -> String {
        if character.isASCII, let ascii = character.asciiValue, ascii >= 0x20, ascii < 0x7F { return "'\(character)'" }
        return "U+" + character.unicodeScalars.map { String($0.value, radix: 16, uppercase: true) }.joined(separator: " U+")
    }
}
