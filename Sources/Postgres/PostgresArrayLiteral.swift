/// PostgreSQL array literals (`{"a","b"}`), passed as one text parameter and cast in SQL
/// (`$1::text[]`, `$2::bigint[]`, `$3::bytea[]`), so that a batch of N rows needs one parameter per
/// column, not N. Array input syntax: PostgreSQL 15 docs, §8.15.2 "Array Value Input".
public enum PostgresArrayLiteral {
    /// Every element quoted, with `"` and `\` escaped. The strings must not contain U+0000 (the
    /// server refuses it, as it refuses it in any text).
    public static func text(_ values: some Sequence<String>) -> String {
        // Byte by byte: `"` and `\` are ASCII, so they never occur inside a multi-byte UTF-8 sequence.
        var out: [UInt8] = [UInt8(ascii: "{")]
        var first = true
        for value in values {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            out.append(UInt8(ascii: "\""))
            for byte in value.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    /// `bigint` elements: integers need no quoting.
    public static func int64(_ values: some Sequence<Int64>) -> String {
        "{" + values.map(String.init).joined(separator: ",") + "}"
    }

    /// `bytea` elements in hex input format (`\x0a1b`, PostgreSQL 15 docs, §8.4.1); the backslash is
    /// escaped once more for the array literal.
    public static func bytea(_ values: some Sequence<[UInt8]>) -> String {
        // No reserveCapacity per element: it grows the buffer to exactly what it is asked, so asking
        // once per element copied the whole literal each time (3 × slower for 1,000 rows of 250 bytes).
        let digits: StaticString = "0123456789abcdef"
        var out: [UInt8] = [UInt8(ascii: "{")]
        var first = true
        for value in values {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            out.append(contentsOf: #""\\x"#.utf8)
            for byte in value {
                out.append(digits.utf8Start[Int(byte >> 4)])
                out.append(digits.utf8Start[Int(byte & 0x0f)])
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }
}
