import DispatcherStatus
/// The pages of one campaign being sent at once, and the checkpoint they allow (docs/campaigns.md,
/// "Pages in flight"). Pages are issued in audience order, start their last send in that order and
/// may finish in any order; the checkpoint only moves over the finished prefix, so a resumed holder
/// never skips a token whose page had not finished. A page is *sending* until its last send started
/// and *unfinished* until every one of its notifications has its outcome. No I/O.
struct CampaignPageWindow {
    /// A position a holder may write: every token up to and including `cursor` has its final
    /// outcome, and `counts` are those outcomes plus the ones before the campaign resumed.
    struct Checkpoint: Equatable {
        var cursor: String?
        var counts: CampaignCounts
    }

    /// What the campaign row may say now.
    private(set) var checkpoint: Checkpoint
    /// Issued pages not yet passed by the checkpoint, in issue order.
    private var pages: [(sequence: Int, lastToken: String, started: Bool, counts: CampaignCounts?)] = []
    private var nextSequence = 0

    /// - Parameters:
    ///   - cursor: the row's checkpoint when the lease was taken (nil: the audience's start).
    ///   - counts: the row's counts then.
    init(cursor: String?, counts: CampaignCounts) {
        checkpoint = Checkpoint(cursor: cursor, counts: counts)
    }

    /// Pages issued and not yet passed by the checkpoint (finished or not).
    var pending: Int { pages.count }

    /// Pages issued whose sends have not finished.
    var unfinished: Int { pages.count { $0.counts == nil } }

    /// Pages issued whose last send has not started yet.
    var sending: Int { pages.count { !$0.started } }

    /// Takes the next page of the audience, whose last (greatest) token is `lastToken`.
    /// - Returns: the page's sequence number, for `finish`.
    mutating func issue(lastToken: String) -> Int {
        defer { nextSequence += 1 }
        pages.append((nextSequence, lastToken, false, nil))
        return nextSequence
    }

    /// Records that page `sequence` started its last send (or ended early); its answers may still be
    /// outstanding. An unknown sequence (passed by the checkpoint already) changes nothing.
    mutating func started(_ sequence: Int) {
        guard let index = pages.firstIndex(where: { $0.sequence == sequence }) else { return }
        pages[index].started = true
    }

    /// Records that every token of page `sequence` has its final outcome.
    /// - Returns: the new checkpoint when the finished prefix grew, nil when an earlier page is still
    ///   being sent (or `sequence` is unknown or finished already).
    mutating func finish(_ sequence: Int, counts: CampaignCounts) -> Checkpoint? {
        guard let index = pages.firstIndex(where: { $0.sequence == sequence }), pages[index].counts == nil else { return nil }
        pages[index].counts = counts
        pages[index].started = true
        var advanced = false
        while let first = pages.first, let finished = first.counts {
            checkpoint = Checkpoint(cursor: first.lastToken, counts: checkpoint.counts + finished)
            pages.removeFirst()
            advanced = true
        }
        return advanced ? checkpoint : nil
    }
}
