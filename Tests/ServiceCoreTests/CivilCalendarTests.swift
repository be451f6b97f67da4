import Testing

@testable import ServiceCore

/// `CivilCalendar`, the one conversion between day counts and dates that HTTP dates, PostgreSQL's
/// date text and the `send_log_v2` day partitions share.
@Suite struct CivilCalendarTests {
    /// Known days, against `date -u -d @$((days * 86400)) +%F`.
    @Test(arguments: [
        (Int64(0), Int64(1970), Int64(1), Int64(1)),
        (-1, 1969, 12, 31),
        (11_016, 2000, 2, 29),
        (11_017, 2000, 3, 1),
        (-25_509, 1900, 2, 28),
        (-25_508, 1900, 3, 1),
        (20_791, 2026, 12, 4),
        (2_932_896, 9999, 12, 31),
        (-719_468, 0, 3, 1),
        (-719_469, 0, 2, 29),
    ])
    func knownDays(days: Int64, year: Int64, month: Int64, day: Int64) {
        #expect(CivilCalendar.civil(fromDays: days) == (year, month, day))
        #expect(CivilCalendar.days(fromYear: year, month: month, day: day) == days)
    }

    /// Every day of four centuries around the epoch goes to a valid date and back, one day after the other.
    @Test func everyDayRoundTripsAndFollowsTheDayBefore() {
        var previous = CivilCalendar.civil(fromDays: -73_050)
        var wrong: [String] = []
        for days in Int64(-73_049)...73_050 {
            let date = CivilCalendar.civil(fromDays: days)
            let valid = (1...12).contains(date.month) && (1...31).contains(date.day)
            let back = CivilCalendar.days(fromYear: date.year, month: date.month, day: date.day)
            let sameMonth = date.year == previous.year && date.month == previous.month && date.day == previous.day + 1
            let nextMonth = date.day == 1 && (date.month == previous.month + 1 || (date.month == 1 && previous.month == 12))
            if !valid || back != days || !(sameMonth || nextMonth), wrong.count < 10 { wrong.append("\(days): \(previous) → \(date), back \(back)") }
            previous = date
        }
        #expect(wrong.isEmpty, "\(wrong)")
    }
}
