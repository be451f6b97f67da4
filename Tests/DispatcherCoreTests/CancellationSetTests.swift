import Testing

@testable import DispatcherCore

/// The process-wide set of cancels and the poll cursor, without I/O (docs/campaigns.md "Cancellation").
@Suite struct CancellationSetTests {
    /// The defect this replaces: a list of the last 10,000 cancels forgot a cancel after 10,000 others.
    /// Bounded by time, 10,050 later cancels for other ids leave it in place.
    @Test func tenThousandFiftyOtherCancelsDoNotPushACancelOut() {
        var set = CancellationSet()
        set.insert("victim", atMs: 1_000)
        for index in 0..<10_050 { set.insert("other-\(index)", atMs: 1_000 + Int64(index)) }
        #expect(set.contains("victim"))
        #expect(set.count == 10_051)
        let dropped = set.expire(before: 1_000)
        #expect(dropped == 0)
        #expect(set.contains("victim"))
    }

    /// Expiry is by time only: exactly the ids recorded before the cut-off go, whatever the order
    /// they were inserted in.
    @Test func expiryDropsExactlyTheCancelsRecordedBeforeTheCutoff() {
        var set = CancellationSet()
        let times: [Int64] = [50, 10, 90, 30, 70, 20, 80, 60, 40, 0]
        for (index, time) in times.enumerated() { set.insert("r\(index)", atMs: time) }
        let first = set.expire(before: 45)
        #expect(first == 5)
        for (index, time) in times.enumerated() { #expect(set.contains("r\(index)") == (time >= 45), "r\(index) at \(time)") }
        let again = set.expire(before: 45)
        #expect(again == 0)
        let rest = set.expire(before: 1_000)
        #expect(rest == 5)
        #expect(set.count == 0)
    }

    /// A cancel recorded again later lives from its latest time; recording it again with an older
    /// time (a poll reading its row again) changes nothing.
    @Test func aLaterRecordKeepsACancelAndAnOlderOneChangesNothing() {
        var set = CancellationSet()
        let new = set.insert("r", atMs: 100)
        let later = set.insert("r", atMs: 500)
        let older = set.insert("r", atMs: 200)
        #expect(new && !later && !older)
        let beforeLatest = set.expire(before: 300)
        #expect(beforeLatest == 0)
        #expect(set.contains("r"))
        let afterLatest = set.expire(before: 501)
        #expect(afterLatest == 1)
        #expect(!set.contains("r"))
        let newAgain = set.insert("r", atMs: 600)
        #expect(newAgain)
    }

    /// The cursor moves to the oldest transaction running at the first page, never back.
    @Test func theCursorMovesToTheOldestRunningTransactionOnly() {
        let start = CancellationStore.Cursor(transactionID: 100)
        #expect(start.advanced(horizon: 150).transactionID == 150)
        #expect(start.advanced(horizon: 90).transactionID == 100)
        #expect(CancellationStore.Cursor().advanced(horizon: 7).transactionID == 7)
        #expect(CancellationStore.Key(start) == CancellationStore.Key(transactionID: 100, requestID: ""))
    }
}
