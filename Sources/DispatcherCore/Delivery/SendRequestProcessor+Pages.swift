import APNs
import DispatcherStatus
import PushDomain
import ServiceCore

// MARK: - A request's targets in pages (docs/dispatcher-engine.md "A user's tokens in pages")

extension SendRequestProcessor {
    /// Sends a request's targets: `first` (its first read), then the pages `more` has left, read one
    /// at a time. Each page's sends start once the page before started its last one, and the next
    /// page is read then; the sends of every page run side by side in one task group, so a page ends
    /// (and is let go) as soon as its sends started, whatever Apple's answers to them take. A token
    /// that Apple answers late (or never, until the request timeout) holds its own send, never the
    /// pages after it (docs/dispatcher-engine.md "A user's tokens in pages"). At most one page of
    /// tokens (and of earlier outcomes) is held; what is in flight is bounded by admission.
    ///
    /// When `progress` is complete (it holds every earlier outcome of the request: the common case),
    /// it serves every page; otherwise each page reads the earlier outcomes of its own tokens
    /// (`PendingRetryStore.progress(requestID:tokens:)`), so a redelivered million-token request holds
    /// a page's outcomes, not a million.
    /// - Returns: the counts and parked notifications of all pages together, and whether it stopped
    ///   early (`context.shouldStop()`: no further page is read).
    /// A page's reads wait out a PostgreSQL outage (`waitingOutPostgres`): the sends of the pages
    /// before it are in flight, and failing the request would cancel them and send them again on its
    /// next handling.
    /// - Throws: as `deliver`, and `PostgresError` caused by the data from a page's read.
    func deliverPages(
        first: DeliveryBatch, more: UserTokenPages?, progress: PendingRetryStore.RequestProgress, context: DeliveryContext,
        environment: APNsEnvironment?
    ) async throws -> BatchResult {
        if more == nil, progress.complete { return try await deliver(first, context) }
        let activity = RecordActivity(context.retryContext)
        defer { activity.startingDone() }
        let tally = BatchTally()
        let requestID = context.request.requestID
        var pages = more
        var abandoned = false
        try await withThrowingDiscardingTaskGroup { group in
            // The record counts as waiting only on retries once the last page started its last send.
            defer { activity.startingDone() }
            let workers = SendWorkers<AdmittedSend>()
            defer { workers.close() }
            var next: DeliveryBatch? = first
            while let page = next {
                if context.shouldStop() { abandoned = true; break }
                var pageContext = context
                if !progress.complete {
                    // Sends of earlier pages are in flight: PostgreSQL being away must not fail them.
                    let found = try await waitingOutPostgres("reading a page's earlier outcomes failed: retrying", requestID: requestID) {
                        try await parking.progress(requestID: requestID, tokens: page.tokens)
                    }
                    pageContext.recorded = found.recorded
                    pageContext.parked = found.parked
                }
                if try await startSends(page, pageContext, tally: tally, activity: activity, workers: workers, in: &group).abandoned {
                    abandoned = true
                    break
                }
                next = nil
                if let left = pages {
                    let (read, after) = try await waitingOutPostgres("reading a user's next page failed: retrying", requestID: requestID) {
                        var cursor = left
                        let read = try await nextUserPage(&cursor, template: context.template, environment: environment)
                        return (read, cursor)
                    }
                    next = read
                    pages = after
                }
            }
        }
        return BatchResult(counts: tally.counts, parked: tally.parked, abandoned: abandoned)
    }
}
