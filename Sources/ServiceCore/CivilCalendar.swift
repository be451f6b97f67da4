/// Days since 1970-01-01 and dates of the proleptic Gregorian calendar, in UTC: the project's one
/// calendar conversion (HTTP dates, PostgreSQL's date text, the day partitions of `send_log_v2`).
/// Pure integer arithmetic, valid for every day an `Int64` of days can hold without overflow in
/// `days + 719_468`; the algorithms are Howard Hinnant's `days_from_civil` and `civil_from_days`
/// (http://howardhinnant.github.io/date_algorithms.html, public domain).
public enum CivilCalendar {
    /// Days since 1970-01-01 of a date; negative before it.
    /// - Parameters:
    ///   - year: the proleptic Gregorian year (0 is 1 BC).
    ///   - month: 1...12.
    ///   - day: 1...31; a day past the month's end counts on into the next month.
    public static func days(fromYear year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date of `days` since 1970-01-01: year, month (1...12) and day of the month (1...31).
    public static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
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
