import APNs
import DispatcherStatus
import PushDomain
import ServiceCore

// MARK: - A request's targets in pages (docs/dispatcher-engine.md "A user's tokens in pages")

extension SendRequestProcessor {
    /// Pages of one request being sent at once: each starts sending behind the last send of the one
    /// before (as a campaign's pages do), so the budget stays full between pages while at most this
    /// many pages of tokens (and of earlier outcomes) are held.
    static let requestPagesInFlight = 3

    /// Sends a request's targets: `first` (its first read), then the pages `more` has left, each
    /// through the pipeline (`deliver`). When `progress` is complete (it holds every earlier outcome of
    /// the request: the common case), it serves every page; otherwise each page reads the earlier
    /// outcomes of its own tokens (`PendingRetryStore.progress(requestID:tokens:)`), so a redelivered
    /// million-token request holds a page's outcomes, not a million.
    ///
    /// The pages share one `RecordActivity`: the record counts as waiting only on retries once its
    /// last page started its last send.
    /// - Returns: the counts, parked notifications and abandonment of all pages together; once a
    ///   page is abandoned (`context.shouldStop()`), no further page is read.
    /// - Throws: as `deliver`, and `PostgresError` from a page's read.
    func deliverPages(
        first: DeliveryBatch, more: UserTokenPages?, progress: PendingRetryStore.RequestProgress, context: DeliveryContext,
        environment: APNsEnvironment?
    ) async throws -> BatchResult {
        if more == nil, progress.complete { return try await deliver(first, context) }
        let activity = RecordActivity(context.retryContext)
        defer { activity.startingDone() }
        var pages = more
        var total = BatchResult()
        try await withThrowingTaskGroup(of: BatchResult.self) { group in
            var running = 0
            var previousStarted: OneShot?
            var next: DeliveryBatch? = first
            while let page = next {
                if context.shouldStop() { total.abandoned = true; break }
                var pageContext = context
                if !progress.complete {
                    let found = try await parking.progress(requestID: context.request.requestID, tokens: page.tokens)
                    pageContext.recorded = found.recorded
                    pageContext.parked = found.parked
                }
                let turn = (after: previousStarted, started: OneShot())
                previousStarted = turn.started
                pageContext.turn = turn
                if running == Self.requestPagesInFlight, let done = try await group.next() {
                    total.add(done)
                    running -= 1
                }
                group.addTask { [pageContext] in try await self.deliver(page, pageContext, activity: activity) }
                running += 1
                if var left = pages {
                    next = try await nextUserPage(&left, template: context.template, environment: environment)
                    pages = left
                } else {
                    next = nil
                }
            }
            // Nothing more starts once the last page issued started its last send.
            await previousStarted?.wait()
            activity.startingDone()
            for try await done in group { total.add(done) }
        }
        return total
    }
}

extension BatchResult {
    /// Adds another page's result to this one.
    mutating func add(_ other: BatchResult) {
        counts = counts + other.counts
        parked += other.parked
        abandoned = abandoned || other.abandoned
    }
}
