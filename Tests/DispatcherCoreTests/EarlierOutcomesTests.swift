import Postgres
import Testing

@testable import DispatcherCore

/// `EarlierOutcomes` without I/O: which reads a campaign's pages make of what earlier holders sent,
/// and which outcomes each page gets (docs/campaigns.md "Pages in flight").
@Suite struct EarlierOutcomesTests {
    static func outcome(_ byte: UInt8) -> TokenStore.RecordedOutcome { TokenStore.RecordedOutcome(event: [byte], acknowledged: false) }

    static func chunk(recorded: [String: UInt8] = [:], parked: Set<String> = [], through: String?) -> PendingRetryStore.OutcomeChunk {
        var progress = PendingRetryStore.RequestProgress()
        progress.recorded = recorded.mapValues(outcome)
        progress.parked = parked
        return PendingRetryStore.OutcomeChunk(progress: progress, coveredThrough: through)
    }

    @Test func aCampaignNobodySentBeforeReadsOnceAndFindsNothing() throws {
        var earlier = EarlierOutcomes(checkpoint: nil)
        #expect(earlier.nextRead(forPageThrough: "10") == "", "the first page reads from the audience's start")
        try earlier.add(Self.chunk(through: nil))
        #expect(earlier.horizon == .end)
        #expect(earlier.nextRead(forPageThrough: "10") == nil && earlier.nextRead(forPageThrough: "ff") == nil, "no page reads again")
        #expect(earlier.take(through: "ff") == PendingRetryStore.RequestProgress())
    }

    @Test func aResumedCampaignReadsChunksUntilItPassesWhatEarlierHoldersSentThenNone() throws {
        var earlier = EarlierOutcomes(checkpoint: "10")
        // Page one ends at 30: the first chunk is complete through 25 only, so a second read follows.
        #expect(earlier.nextRead(forPageThrough: "30") == "10")
        try earlier.add(Self.chunk(recorded: ["11": 1, "12": 2, "40": 4], parked: ["20"], through: "25"))
        #expect(earlier.nextRead(forPageThrough: "30") == "25")
        try earlier.add(Self.chunk(recorded: ["26": 3], parked: ["45"], through: nil))
        #expect(earlier.nextRead(forPageThrough: "30") == nil)
        let first = earlier.take(through: "30")
        #expect(first.recorded == ["11": Self.outcome(1), "12": Self.outcome(2), "26": Self.outcome(3)])
        #expect(first.parked == ["20"])
        // Page two gets what lay past page one, page three nothing; neither reads.
        #expect(earlier.nextRead(forPageThrough: "50") == nil)
        let second = earlier.take(through: "50")
        #expect(second.recorded == ["40": Self.outcome(4)] && second.parked == ["45"])
        #expect(earlier.nextRead(forPageThrough: "60") == nil && earlier.take(through: "60") == PendingRetryStore.RequestProgress())
    }

    @Test func aPageWithinWhatIsHeldDoesNotRead() throws {
        var earlier = EarlierOutcomes(checkpoint: "10")
        try earlier.add(Self.chunk(recorded: ["15": 1, "35": 2], through: "40"))
        #expect(earlier.nextRead(forPageThrough: "20") == nil && earlier.nextRead(forPageThrough: "40") == nil)
        #expect(earlier.take(through: "20").recorded.keys.sorted() == ["15"])
        #expect(earlier.nextRead(forPageThrough: "41") == "40", "past what is held: read on")
    }

    @Test func aChunkThatDoesNotMovePastItsCursorIsAnError() throws {
        var earlier = EarlierOutcomes(checkpoint: "10")
        try earlier.add(Self.chunk(recorded: ["20": 1], through: "20"))
        #expect(throws: PostgresError.self) { try earlier.add(Self.chunk(recorded: ["20": 1], through: "20")) }
        #expect(throws: PostgresError.self) { try earlier.add(Self.chunk(through: "15")) }
        #expect(earlier.horizon == .through("20"), "the failed adds changed nothing")
    }
}
