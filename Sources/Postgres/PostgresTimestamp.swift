import ServiceCore

/// Conversions between milliseconds since the UNIX epoch and PostgreSQL's ISO text format
/// (`DateStyle = ISO`, the server default): `2024-01-02 03:04:05.123456+05:30`, `2024-01-02`.
enum PostgresTimestamp {
    /// `YYYY-MM-DD HH:MM:SS.mmm+00` for `milliseconds` since the epoch (proleptic Gregorian, UTC).
    static func format(milliseconds: Int64) -> String {
        let (days, msOfDay) = floorDivide(milliseconds, 86_400_000)
        let (year, month, day) = CivilCalendar.civil(fromDays: days)
        let hour = msOfDay / 3_600_000, minute = msOfDay / 60_000 % 60, second = msOfDay / 1000 % 60, ms = msOfDay % 1000
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2)) \(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2)).\(pad(ms, 3))+00"
    }

    /// Milliseconds since the epoch for a `timestamptz`, `timestamp` (taken as UTC) or `date` in ISO
    /// text output; microseconds are rounded down. `nil` when the text is not such a value
    /// (`infinity`, another DateStyle).
    static func parse(_ text: String) -> Int64? {
        var scanner = Scanner(Array(text.utf8))
        var isBC = false
        if text.hasSuffix(" BC") { isBC = true; scanner.end -= 3 }
        guard var year = scanner.number(minDigits: 4), scanner.take(UInt8(ascii: "-")),
              let month = scanner.number(minDigits: 2, maxDigits: 2), scanner.take(UInt8(ascii: "-")),
              let day = scanner.number(minDigits: 2, maxDigits: 2),
              (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        if isBC { year = 1 - year }
        var ms = CivilCalendar.days(fromYear: year, month: month, day: day) * 86_400_000
        if scanner.atEnd { return ms }
        guard scanner.take(UInt8(ascii: " ")) || scanner.take(UInt8(ascii: "T")),
              let hour = scanner.number(minDigits: 2, maxDigits: 2), scanner.take(UInt8(ascii: ":")),
              let minute = scanner.number(minDigits: 2, maxDigits: 2), scanner.take(UInt8(ascii: ":")),
              let second = scanner.number(minDigits: 2, maxDigits: 2)
        else { return nil }
        ms += (hour * 3600 + minute * 60 + second) * 1000
        if scanner.take(UInt8(ascii: ".")) {
            var scale: Int64 = 100
            var fraction: Int64 = 0
            var digits = 0
            while let digit = scanner.digit() {
                fraction += digit * scale
                scale /= 10
                digits += 1
            }
            guard digits > 0 else { return nil }
            ms += fraction
        }
        if scanner.atEnd { return ms }
        let sign: Int64
        if scanner.take(UInt8(ascii: "+")) { sign = 1 } else if scanner.take(UInt8(ascii: "-")) { sign = -1 } else { return nil }
        guard let offsetHours = scanner.number(minDigits: 2, maxDigits: 2) else { return nil }
        var offsetSeconds = offsetHours * 3600
        if scanner.take(UInt8(ascii: ":")) {
            guard let minutes = scanner.number(minDigits: 2, maxDigits: 2) else { return nil }
            offsetSeconds += minutes * 60
            if scanner.take(UInt8(ascii: ":")) {
                guard let seconds = scanner.number(minDigits: 2, maxDigits: 2) else { return nil }
                offsetSeconds += seconds
            }
        }
        guard scanner.atEnd else { return nil }
        return ms - sign * offsetSeconds * 1000
    }

    private struct Scanner {
        let bytes: [UInt8]
        var position = 0
        var end: Int
        init(_ bytes: [UInt8]) { self.bytes = bytes; self.end = bytes.count }
        var atEnd: Bool { position >= end }
        mutating func take(_ byte: UInt8) -> Bool {
            guard position < end, bytes[position] == byte else { return false }
            position += 1
            return true
        }
        mutating func digit() -> Int64? {
            guard position < end, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) else { return nil }
            defer { position += 1 }
            return Int64(bytes[position] - UInt8(ascii: "0"))
        }
        mutating func number(minDigits: Int, maxDigits: Int = 9) -> Int64? {
            var value: Int64 = 0
            var count = 0
            while count < maxDigits, let digit = digit() {
                value = value * 10 + digit
                count += 1
            }
            return count >= minDigits ? value : nil
        }
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    private static func floorDivide(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        var q = a / b, r = a % b
        if r < 0 { q -= 1; r += b }
        return (q, r)
    }
}
