import ServiceCore

/// A UTC calendar day, the partition key of `send_log_v2` (`request_day`, docs/send-log.md "The
/// partition key"): days since 1970-01-01.
public struct SendLogDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Milliseconds in a day.
    public static let milliseconds: Int64 = 86_400_000

    /// Days since 1970-01-01 (UTC); negative before it.
    public var number: Int64

    /// The day numbered `number`.
    public init(number: Int64) { self.number = number }

    /// The UTC day holding `milliseconds` since the Unix epoch (floor division: -1 ms is 1969-12-31).
    public init(milliseconds: Int64) {
        let (quotient, remainder) = milliseconds.quotientAndRemainder(dividingBy: Self.milliseconds)
        self.number = remainder < 0 ? quotient - 1 : quotient
    }

    /// The day after this one.
    public var next: SendLogDay { SendLogDay(number: number + 1) }

    /// The first millisecond of the day since the Unix epoch.
    public var startMilliseconds: Int64 { number * Self.milliseconds }

    /// The day as `YYYY-MM-DD` (proleptic Gregorian calendar), as PostgreSQL reads a `date`.
    public var description: String {
        let (year, month, day) = civil
        return "\(Self.pad(year, 4))-\(Self.pad(month, 2))-\(Self.pad(day, 2))"
    }

    /// The name of this day's partition of `send_log_v2`: `send_log_v2_YYYYMMDD`.
    public var partitionName: String {
        let (year, month, day) = civil
        return "send_log_v2_\(Self.pad(year, 4))\(Self.pad(month, 2))\(Self.pad(day, 2))"
    }

    /// The day whose partition is named `name` (`partitionName`), or nil for any other name (such as
    /// the `DEFAULT` partition's, `send_log_v2_default`).
    public init?(partitionName name: String) {
        let prefix = "send_log_v2_"
        guard name.hasPrefix(prefix) else { return nil }
        let digits = name.dropFirst(prefix.count)
        guard digits.count == 8, digits.allSatisfy(\.isASCII), let value = Int64(digits), value >= 0 else { return nil }
        let year = value / 10_000, month = value / 100 % 100, day = value % 100
        guard (1...12).contains(month), (1...31).contains(day) else { return nil }
        self.number = CivilCalendar.days(fromYear: year, month: month, day: day)
        guard partitionName == name else { return nil }
    }

    public static func < (lhs: SendLogDay, rhs: SendLogDay) -> Bool { lhs.number < rhs.number }

    /// (year, month, day) of the day.
    private var civil: (Int64, Int64, Int64) { CivilCalendar.civil(fromDays: number) }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }
}
