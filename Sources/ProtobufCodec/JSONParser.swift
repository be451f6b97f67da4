/// A recursive-descent JSON parser over UTF-8 bytes.
struct JSONParser {
    let bytes: [UInt8]
    var position = 0
    var depth = 0
    /// Most members of one object or elements of one array; more throw `.tooManyElements` at once,
    /// before the rest is parsed.
    let maximumElements: Int

    init(bytes: [UInt8], maximumElements: Int = .max) {
        self.bytes = bytes
        self.maximumElements = maximumElements
    }

    private func checkCount(_ count: Int, _ what: String) throws(ProtobufError) {
        guard count < maximumElements else {
            throw ProtobufError(.tooManyElements, "a JSON \(what) with more than \(maximumElements) entries", offset: position)
        }
    }

    private func error(_ message: String, at offset: Int? = nil) -> ProtobufError {
        let at = offset ?? position
        return ProtobufError(.invalidJSON, "invalid JSON at byte \(at): \(message)", offset: at)
    }

    private var found: String {
        guard position < bytes.count else { return "the end of the input" }
        let byte = bytes[position]
        if byte >= 0x21 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x\(String(byte, radix: 16))"
    }

    mutating func parseDocument() throws(ProtobufError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard position == bytes.count else { throw error("unexpected \(found) after the JSON value") }
        return value
    }

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func parseValue() throws(ProtobufError) -> JSONValue {
        guard position < bytes.count else { throw error("expected a value, found the end of the input") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return .object(try parseObject())
        case UInt8(ascii: "["): return .array(try parseArray())
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let start = position
            try scanNumber()
            return .number(String(decoding: bytes[start..<position], as: UTF8.self))
        default:
            throw error("expected a value, found \(found)")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(ProtobufError) {
        let count = literal.utf8CodeUnitCount
        let matches = position + count <= bytes.count && literal.withUTF8Buffer { expected in
            bytes[position..<(position + count)].elementsEqual(expected)
        }
        guard matches else { throw error("expected \(literal), found \(found)") }
        position += count
    }

    private mutating func enter() throws(ProtobufError) {
        depth += 1
        guard depth <= ProtobufReader.maximumDepth else {
            throw ProtobufError(.nestingTooDeep, "JSON nested deeper than \(ProtobufReader.maximumDepth)", offset: position)
        }
    }

    private mutating func parseObject() throws(ProtobufError) -> JSONObject {
        try enter()
        position += 1
        var members: [JSONObject.Member] = []
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            depth -= 1
            return JSONObject(members: members)
        }
        while true {
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else {
                throw error("expected a string key, found \(found)")
            }
            let key = try parseString()
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else {
                throw error("expected ':' after the key \"\(key)\", found \(found)")
            }
            position += 1
            skipWhitespace()
            try checkCount(members.count, "object")
            members.append(JSONObject.Member(key: key, value: try parseValue()))
            skipWhitespace()
            guard position < bytes.count else { throw error("unterminated object") }
            if bytes[position] == UInt8(ascii: ",") { position += 1; continue }
            if bytes[position] == UInt8(ascii: "}") { position += 1; break }
            throw error("expected ',' or '}' in an object, found \(found)")
        }
        depth -= 1
        return JSONObject(members: members)
    }

    private mutating func parseArray() throws(ProtobufError) -> [JSONValue] {
        try enter()
        position += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            depth -= 1
            return elements
        }
        while true {
            skipWhitespace()
            try checkCount(elements.count, "array")
            elements.append(try parseValue())
            skipWhitespace()
            guard position < bytes.count else { throw error("unterminated array") }
            if bytes[position] == UInt8(ascii: ",") { position += 1; continue }
            if bytes[position] == UInt8(ascii: "]") { position += 1; break }
            throw error("expected ',' or ']' in an array, found \(found)")
        }
        depth -= 1
        return elements
    }

    /// Scans a number literal per RFC 8259 §6, leaving `position` after it.
    mutating func scanNumber() throws(ProtobufError) {
        let start = position
        func digit(_ index: Int) -> Bool {
            index < bytes.count && bytes[index] >= UInt8(ascii: "0") && bytes[index] <= UInt8(ascii: "9")
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard digit(position) else { throw error("malformed number", at: start) }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            while digit(position) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            position += 1
            guard digit(position) else { throw error("malformed number: no digit after '.'", at: start) }
            while digit(position) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard digit(position) else { throw error("malformed number: no digit in the exponent", at: start) }
            while digit(position) { position += 1 }
        }
    }

    private func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    private mutating func parseHex4() throws(ProtobufError) -> UInt32 {
        guard position + 4 <= bytes.count else { throw error("truncated \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = hexValue(bytes[position]) else { throw error("malformed \\u escape") }
            value = value << 4 | digit
            position += 1
        }
        return value
    }

    /// Parses a string starting at its opening quote; validates UTF-8 and escapes.
    private mutating func parseString() throws(ProtobufError) -> String {
        let quote = position
        position += 1
        var runStart = position
        var decoded: [UInt8] = []
        var hasEscapes = false
        while true {
            guard position < bytes.count else { throw error("unterminated string", at: quote) }
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") { break }
            if byte < 0x20 { throw error("unescaped control character in a string") }
            if byte != UInt8(ascii: "\\") { position += 1; continue }
            hasEscapes = true
            decoded.append(contentsOf: bytes[runStart..<position])
            position += 1
            guard position < bytes.count else { throw error("unterminated string", at: quote) }
            let escape = bytes[position]
            position += 1
            switch escape {
            case UInt8(ascii: "\""): decoded.append(0x22)
            case UInt8(ascii: "\\"): decoded.append(0x5C)
            case UInt8(ascii: "/"): decoded.append(0x2F)
            case UInt8(ascii: "b"): decoded.append(0x08)
            case UInt8(ascii: "f"): decoded.append(0x0C)
            case UInt8(ascii: "n"): decoded.append(0x0A)
            case UInt8(ascii: "r"): decoded.append(0x0D)
            case UInt8(ascii: "t"): decoded.append(0x09)
            case UInt8(ascii: "u"):
                var scalarValue = try parseHex4()
                if scalarValue >= 0xD800 && scalarValue < 0xDC00 {
                    guard position + 2 <= bytes.count, bytes[position] == UInt8(ascii: "\\"),
                          bytes[position + 1] == UInt8(ascii: "u") else {
                        throw error("unpaired UTF-16 surrogate in a \\u escape")
                    }
                    position += 2
                    let low = try parseHex4()
                    guard low >= 0xDC00 && low < 0xE000 else { throw error("unpaired UTF-16 surrogate in a \\u escape") }
                    scalarValue = 0x10000 + ((scalarValue - 0xD800) << 10) + (low - 0xDC00)
                } else if scalarValue >= 0xDC00 && scalarValue < 0xE000 {
                    throw error("unpaired UTF-16 surrogate in a \\u escape")
                }
                guard let scalar = Unicode.Scalar(scalarValue) else { throw error("invalid \\u escape") }
                decoded.append(contentsOf: String(Character(scalar)).utf8)
            default:
                throw error("invalid escape '\\\(Character(Unicode.Scalar(escape)))'", at: position - 2)
            }
            runStart = position
        }
        let end = position
        position += 1
        let string: String?
        if hasEscapes {
            decoded.append(contentsOf: bytes[runStart..<end])
            string = String(validating: decoded, as: UTF8.self)
        } else {
            string = bytes.withUnsafeBufferPointer { all in
                String(validating: UnsafeBufferPointer(rebasing: all[(quote + 1)..<end]), as: UTF8.self)
            }
        }
        guard let string else {
            throw ProtobufError(.invalidUTF8, "invalid JSON at byte \(quote): string is not valid UTF-8", offset: quote)
        }
        return string
    }
}
