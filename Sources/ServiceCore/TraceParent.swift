/// A W3C Trace Context `traceparent` value (https://www.w3.org/TR/trace-context/#traceparent-header):
/// `version-traceid-parentid-traceflags`, lowercase hex, e.g.
/// `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`.
///
/// Parsing follows the specification's rules for version `00`: exactly 55 characters, four fields of
/// 2, 32, 16 and 2 lowercase hex digits, a trace id and a parent id that are not all zeros, and never
/// version `ff`. A value of a later version is accepted when its first 55 characters parse and the
/// next character, if any, is `-` (the specification's forward-compatibility rule); it is kept as it
/// came (`text`). Leading and trailing spaces and tabs (HTTP's optional whitespace) are ignored.
public struct TraceParent: Sendable, Hashable, CustomStringConvertible {
    /// The header text, as received (without surrounding whitespace) or as generated.
    public let text: String

    /// Parses `text`; nil when it is not a valid `traceparent`.
    public init?(_ text: String) {
        var trimmed = Substring(text)
        while let first = trimmed.first, first == " " || first == "\t" { trimmed.removeFirst() }
        while let last = trimmed.last, last == " " || last == "\t" { trimmed.removeLast() }
        let bytes = Array(trimmed.utf8)
        guard bytes.count >= 55 else { return nil }
        guard bytes[2] == UInt8(ascii: "-"), bytes[35] == UInt8(ascii: "-"), bytes[52] == UInt8(ascii: "-") else { return nil }
        guard Self.isLowerHex(bytes[0..<2]), Self.isLowerHex(bytes[3..<35]), Self.isLowerHex(bytes[36..<52]),
              Self.isLowerHex(bytes[53..<55])
        else { return nil }
        let version = bytes[0..<2]
        if version.elementsEqual("ff".utf8) { return nil }
        if version.elementsEqual("00".utf8) {
            guard bytes.count == 55 else { return nil }
        } else if bytes.count > 55, bytes[55] != UInt8(ascii: "-") {
            return nil
        }
        if bytes[3..<35].allSatisfy({ $0 == UInt8(ascii: "0") }) || bytes[36..<52].allSatisfy({ $0 == UInt8(ascii: "0") }) {
            return nil
        }
        self.text = String(trimmed)
    }

    /// A new trace: version `00`, a random 16-byte trace id, a random 8-byte parent id and the
    /// `sampled` flag set (this service starts the trace and asks that it be recorded).
    /// The bits come from `RandomBytePool` (OpenSSL's generator, drawn 4 KiB at a time), not from
    /// `SystemRandomNumberGenerator`, which makes a system call for every 8 bytes (three per trace):
    /// the dispatcher starts a trace for every request that carries none.
    public static func random() -> TraceParent {
        var generator = PooledRandomNumberGenerator()
        return random(using: &generator)
    }

    /// A new trace drawn from `generator` (tests pass a seeded one).
    public static func random<G: RandomNumberGenerator>(using generator: inout G) -> TraceParent {
        // One generator call per 8 bytes (the system generator makes a system call each time).
        func nonZero() -> UInt64 {
            while true {
                let value = generator.next()
                // All zeros is invalid (probability 2^-64): draw again.
                if value != 0 { return value }
            }
        }
        var high = generator.next(), low = generator.next()
        while high == 0 && low == 0 { (high, low) = (generator.next(), generator.next()) }
        let parent = nonZero()
        var text = [UInt8]()
        text.reserveCapacity(55)
        text.append(contentsOf: "00-".utf8)
        for word in [high, low] { appendHex(word, to: &text) }
        text.append(UInt8(ascii: "-"))
        appendHex(parent, to: &text)
        text.append(contentsOf: "-01".utf8)
        return TraceParent(String(decoding: text, as: UTF8.self))!
    }

    /// The version field (2 hex digits).
    public var version: String { String(text.utf8.prefix(2))! }
    /// The trace id (32 lowercase hex digits): the whole trace's identity, logged as `trace_id`.
    public var traceID: String { String(text.utf8.dropFirst(3).prefix(32))! }
    /// The parent id (16 lowercase hex digits): the caller's span.
    public var parentID: String { String(text.utf8.dropFirst(36).prefix(16))! }
    /// The trace flags (2 hex digits); bit 0 is `sampled`.
    public var flags: UInt8 { UInt8(String(text.utf8.dropFirst(53).prefix(2))!, radix: 16)! }
    /// Whether the caller recorded (or may record) its part of the trace (flag bit 0).
    public var isSampled: Bool { flags & 1 == 1 }

    public var description: String { text }

    /// The W3C header name, also used as the Kafka record header name and the gRPC metadata key.
    public static let headerName = "traceparent"

    private static func isLowerHex(_ bytes: ArraySlice<UInt8>) -> Bool {
        bytes.allSatisfy { ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "f")) }
    }

    /// Appends the 16 lowercase hex digits of `word`, most significant first.
    private static func appendHex(_ word: UInt64, to text: inout [UInt8]) {
        let digits: StaticString = "0123456789abcdef"
        for shift in stride(from: 60, through: 0, by: -4) {
            text.append(digits.utf8Start[Int((word >> UInt64(shift)) & 0xf)])
        }
    }
}

extension TraceParent {
    /// The trace context of one request, chosen among the places it may come from, in order: the
    /// first valid candidate wins; invalid or empty candidates are skipped; with none, a new random
    /// trace is started.
    /// - Parameter candidates: `traceparent` texts in order of precedence (nil or empty: absent).
    /// - Returns: the chosen trace and whether it was generated here.
    public static func resolve(_ candidates: [String?]) -> (trace: TraceParent, generated: Bool) {
        for candidate in candidates {
            if let candidate, !candidate.isEmpty, let trace = TraceParent(candidate) { return (trace, false) }
        }
        return (random(), true)
    }
}
