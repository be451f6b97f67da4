/// Wire helpers of gRPC over HTTP/2 (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md).
public enum GRPCWire {
    /// Frames `message` as a Length-Prefixed-Message: compressed flag 0, 4-byte big-endian length, bytes.
    public static func frame(_ message: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(message.count + 5)
        let length = UInt32(message.count)
        out.append(0)
        out.append(UInt8(truncatingIfNeeded: length >> 24))
        out.append(UInt8(truncatingIfNeeded: length >> 16))
        out.append(UInt8(truncatingIfNeeded: length >> 8))
        out.append(UInt8(truncatingIfNeeded: length))
        out.append(contentsOf: message)
        return out
    }

    /// Reads the single Length-Prefixed-Message of a unary request body.
    /// - Throws: `GRPCStatus` `.internal` for a missing, truncated, trailing or compressed message
    ///   (compression is refused: the server only accepts `identity`), `.resourceExhausted` when the
    ///   message is longer than `maxSize` bytes.
    public static func unframeSingle(_ body: [UInt8], maxSize: Int) throws(GRPCStatus) -> [UInt8] {
        guard body.count >= 5 else {
            throw GRPCStatus(.internal, body.isEmpty ? "request has no message" : "truncated message prefix")
        }
        guard body[0] == 0 else {
            if body[0] == 1 { throw GRPCStatus(.internal, "compressed message received but no compression was negotiated (grpc-encoding identity)") }
            throw GRPCStatus(.internal, "invalid compressed-flag \(body[0])")
        }
        let length = Int(body[1]) << 24 | Int(body[2]) << 16 | Int(body[3]) << 8 | Int(body[4])
        guard length <= maxSize else {
            throw GRPCStatus(.resourceExhausted, "message of \(length) bytes exceeds the limit of \(maxSize) bytes")
        }
        guard body.count - 5 == length else {
            throw GRPCStatus(.internal, body.count - 5 < length ? "truncated message" : "more than one message in a unary request")
        }
        return Array(body[5...])
    }

    /// Reads every Length-Prefixed-Message of a streaming request body (possibly none).
    /// - Throws: `GRPCStatus` as `unframeSingle(_:maxSize:)` for each message.
    public static func unframeAll(_ body: [UInt8], maxSize: Int) throws(GRPCStatus) -> [[UInt8]] {
        var messages: [[UInt8]] = []
        var index = 0
        while index < body.count {
            guard body.count - index >= 5 else { throw GRPCStatus(.internal, "truncated message prefix") }
            guard body[index] == 0 else {
                if body[index] == 1 { throw GRPCStatus(.internal, "compressed message received but no compression was negotiated (grpc-encoding identity)") }
                throw GRPCStatus(.internal, "invalid compressed-flag \(body[index])")
            }
            let length = Int(body[index + 1]) << 24 | Int(body[index + 2]) << 16 | Int(body[index + 3]) << 8 | Int(body[index + 4])
            guard length <= maxSize else {
                throw GRPCStatus(.resourceExhausted, "message of \(length) bytes exceeds the limit of \(maxSize) bytes")
            }
            guard body.count - index - 5 >= length else { throw GRPCStatus(.internal, "truncated message") }
            messages.append(Array(body[(index + 5)..<(index + 5 + length)]))
            index += 5 + length
        }
        return messages
    }

    /// Parses `grpc-timeout` (1 to 8 digits and a unit H, M, S, m, u or n).
    /// Returns nil when the value is malformed.
    public static func parseTimeout(_ value: String) -> Duration? {
        let bytes = Array(value.utf8)
        guard bytes.count >= 2, bytes.count <= 9, let unit = bytes.last else { return nil }
        var amount: Int64 = 0
        for byte in bytes.dropLast() {
            guard byte >= 0x30 && byte <= 0x39 else { return nil }
            amount = amount * 10 + Int64(byte - 0x30)
        }
        switch unit {
        case UInt8(ascii: "H"): return .seconds(amount * 3600)
        case UInt8(ascii: "M"): return .seconds(amount * 60)
        case UInt8(ascii: "S"): return .seconds(amount)
        case UInt8(ascii: "m"): return .milliseconds(amount)
        case UInt8(ascii: "u"): return .microseconds(amount)
        case UInt8(ascii: "n"): return .nanoseconds(amount)
        default: return nil
        }
    }

    /// Percent-encodes a `grpc-message` value: bytes outside 0x20–0x7E and `%` become `%XX` of UTF-8.
    public static func percentEncode(_ message: String) -> String {
        var out = ""
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in message.utf8 {
            if byte >= 0x20 && byte <= 0x7E && byte != 0x25 {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out.unicodeScalars.append(Unicode.Scalar(UInt8(ascii: "%")))
                out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0xF)]))
            }
        }
        return out
    }

    /// Decodes a percent-encoded `grpc-message` (invalid escapes are kept as they are).
    public static func percentDecode(_ value: String) -> String {
        var bytes: [UInt8] = []
        let input = Array(value.utf8)
        var i = 0
        func hexValue(_ b: UInt8) -> UInt8? {
            switch b {
            case 0x30...0x39: b - 0x30
            case 0x41...0x46: b - 0x41 + 10
            case 0x61...0x66: b - 0x61 + 10
            default: nil
            }
        }
        while i < input.count {
            if input[i] == 0x25, i + 2 < input.count, let hi = hexValue(input[i + 1]), let lo = hexValue(input[i + 2]) {
                bytes.append(hi << 4 | lo)
                i += 3
            } else {
                bytes.append(input[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
