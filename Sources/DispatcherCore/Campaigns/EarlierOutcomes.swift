import Postgres

/// What earlier holders of a campaign recorded or parked for the tokens past its checkpoint, read in
/// token order a chunk at a time as the pages reach them (`PendingRetryStore.outcomes(of:after:limit:)`,
/// docs/campaigns.md "Pages in flight"). A campaign nobody sent before costs one read that finds
/// nothing; a resumed one reads until it passes the last token an earlier holder sent, then no more.
/// It holds at most a few chunks, never the audience's outcomes. No I/O: `CampaignRunner` reads.
struct EarlierOutcomes: Sendable {
    /// How far the held outcomes are complete.
    enum Horizon: Sendable, Equatable {
        /// Every earlier outcome of a token up to this one (inclusive) is held or was handed out.
        case through(String)
        /// Every earlier outcome is held or was handed out.
        case end
    }

    private(set) var horizon: Horizon
    private var recorded: [String: TokenStore.RecordedOutcome] = [:]
    private var parked: Set<String> = []

    /// Nothing read yet: complete through the checkpoint (nil: the audience's start).
    init(checkpoint: String?) { horizon = .through(checkpoint ?? "") }

    /// The cursor to read the next chunk after before the page ending at `lastToken` can be sent; nil
    /// when the held outcomes cover it.
    func nextRead(forPageThrough lastToken: String) -> String? {
        guard case .through(let token) = horizon, token < lastToken else { return nil }
        return token
    }

    /// Adds a chunk read after `nextRead`'s cursor.
    /// - Throws: `PostgresError` (`unsupportedResult`) when the chunk does not move the horizon past
    ///   that cursor: reading again would read the same rows forever.
    mutating func add(_ chunk: PendingRetryStore.OutcomeChunk) throws {
        if case .through(let before) = horizon, let after = chunk.coveredThrough, after <= before {
            throw PostgresError(code: .unsupportedResult, message: "earlier outcomes read after \"\(before)\" ended at \"\(after)\": the read did not move past its cursor")
        }
        recorded.merge(chunk.progress.recorded) { _, new in new }
        parked.formUnion(chunk.progress.parked)
        horizon = chunk.coveredThrough.map(Horizon.through) ?? .end
    }

    /// The held outcomes of the tokens up to `lastToken` (the page ending there), handed out once.
    mutating func take(through lastToken: String) -> PendingRetryStore.RequestProgress {
        var progress = PendingRetryStore.RequestProgress()
        guard !recorded.isEmpty || !parked.isEmpty else { return progress }
        for (token, outcome) in recorded where token <= lastToken { progress.recorded[token] = outcome }
        recorded = recorded.filter { $0.key > lastToken }
        progress.parked = parked.filter { $0 <= lastToken }
        parked.subtract(progress.parked)
        return progress
    }
}
