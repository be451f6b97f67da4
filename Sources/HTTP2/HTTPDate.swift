/// The HTTP `date` header's preferred format, IMF-fixdate (RFC 9110 §5.6.7):
/// `Sun, 06 Nov 1994 08:49:37 GMT`. Pure arithmetic on the proleptic Gregorian calendar in UTC: no
/// locale, no formatter object.
public enum HTTPDate {
    private static let days = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]  // 1970-01-01 was a Thursday
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// Formats `seconds` since the UNIX epoch (UTC) as IMF-fixdate.
    public static func format(secondsSinceEpoch seconds: Int64) -> String {
        let day = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - day * 86_400
        let (year, month, dayOfMonth) = civil(fromDays: day)
        let weekday = days[Int(((day % 7) + 7) % 7)]
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(weekday), \(two(dayOfMonth)) \(months[Int(month - 1)]) \(year) "
            + "\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60)) GMT"
    }

    /// Parses IMF-fixdate; nil for anything else (the obsolete RFC 850 and asctime forms included).
    /// - Returns: seconds since the UNIX epoch (UTC).
    public static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == 32, bytes[7] == 32, bytes[11] == 32,
              bytes[16] == 32, bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == 32,
              String(decoding: bytes[26...], as: UTF8.self) == "GMT"
        else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for byte in bytes[range] {
                guard byte >= 48 && byte <= 57 else { return nil }
                value = value * 10 + Int64(byte - 48)
            }
            return value
        }
        guard let dayOfMonth = number(5..<7), let year = number(12..<16), let hour = number(17..<19),
              let minute = number(20..<22), let second = number(23..<25),
              let monthIndex = months.firstIndex(of: String(decoding: bytes[8..<11], as: UTF8.self)),
              (1...31).contains(dayOfMonth), hour < 24, minute < 60, second < 61
        else { return nil }
        let day = days(fromCivil: year, Int64(monthIndex + 1), dayOfMonth)
        return day * 86_400 + hour * 3600 + minute * 60 + second
    }

    /// Days since 1970-01-01 of a date (H. Hinnant's `days_from_civil`).
    private static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date of a day count since 1970-01-01 (H. Hinnant's `civil_from_days`).
    private static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
