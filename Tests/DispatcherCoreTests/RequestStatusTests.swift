import DispatcherStatus
import Foundation
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// The request status (docs/campaigns.md "Request status"): the decision and the HTTP answer without
/// I/O, then the reader on a real PostgreSQL.
struct RequestStatusDecisionTests {
    static func counts(delivered: Int64 = 0, rejected: Int64 = 0, failed: Int64 = 0, skipped: Int64 = 0) -> CampaignCounts {
        var counts = CampaignCounts()
        counts.delivered = delivered
        counts.rejected = rejected
        counts.failed = failed
        counts.skipped = skipped
        counts.processed = delivered + rejected + failed + skipped
        return counts
    }

    @Test func aCampaignRowAnswersAloneWhateverTheImmediateTablesHold() throws {
        for state in CampaignState.allCases {
            var facts = RequestStatusDecision.CampaignFacts(state: state)
            facts.sendAtMs = 1_700_000_000_000
            facts.counts = Self.counts(delivered: 7, skipped: 3)
            facts.startedAtMs = 5
            facts.completedAtMs = 9
            var immediate = RequestStatusDecision.ImmediateFacts()
            immediate.completion = .cancelled
            immediate.counts = Self.counts(failed: 99)
            let report = try #require(RequestStatusDecision.report(requestID: "c", campaign: facts, immediate: immediate))
            #expect(report.state == state && report.isCampaign && report.counts == facts.counts && report.sendAtMs == facts.sendAtMs)
            // An open row has no completion time even if one was written before (a reopened row never is).
            #expect(report.completedAtMs == (state.isOpen ? 0 : 9))
        }
    }

    @Test func anImmediateRequestIsRunningUntilItsCompletionIsRecorded() throws {
        var facts = RequestStatusDecision.ImmediateFacts()
        #expect(RequestStatusDecision.report(requestID: "r", campaign: nil, immediate: facts) == nil)
        #expect(RequestStatusDecision.report(requestID: "r", campaign: nil, immediate: nil) == nil)

        facts.counts = Self.counts(delivered: 2)
        var report = try #require(RequestStatusDecision.report(requestID: "r", campaign: nil, immediate: facts))
        #expect(report.state == .running && !report.isCampaign && report.counts.processed == 2)

        // Parked notifications alone (every outcome still waiting for a retry) are known too.
        var parkedOnly = RequestStatusDecision.ImmediateFacts()
        parkedOnly.pendingRequest = true
        parkedOnly.parked = 4
        report = try #require(RequestStatusDecision.report(requestID: "r", campaign: nil, immediate: parkedOnly))
        #expect(report.state == .running && report.parked == 4 && report.counts.processed == 0)

        facts.completion = .completed
        facts.completedAtMs = 1234
        facts.parked = 1  // a finished request has none left; never reported
        report = try #require(RequestStatusDecision.report(requestID: "r", campaign: nil, immediate: facts))
        #expect(report.state == .completed && report.completedAtMs == 1234 && report.parked == 0)

        facts.completion = .cancelled
        report = try #require(RequestStatusDecision.report(requestID: "r", campaign: nil, immediate: facts))
        #expect(report.state == .cancelled)
    }

    @Test func theJSONObjectHasEveryFieldInOrder() {
        var report = RequestStatusReport(requestID: "say \"hi\"/é", state: .running, isCampaign: true)
        report.sendAtMs = 17
        report.counts = Self.counts(delivered: 1, rejected: 2, failed: 3, skipped: 4)
        report.parked = 5
        report.cancelRequested = true
        report.startedAtMs = 6
        #expect(report.json == #"{"request_id":"say \"hi\"/é","status":"running","campaign":true,"send_at_ms":17,"processed":10,"delivered":1,"rejected":2,"failed":3,"skipped":4,"parked":5,"cancel_requested":true,"started_at_ms":6,"completed_at_ms":0}"#)
    }

    struct Refused: Error, CustomStringConvertible { var description: String { "connection refused" } }

    @Test func theHTTPAnswerNamesWhatIsWrong() async throws {
        var report = RequestStatusReport(requestID: "known", state: .completed, isCampaign: false)
        report.counts = Self.counts(delivered: 1)
        let lookup: (String) async throws -> RequestStatusReport? = { $0 == "known" ? report : nil }
        let found = await RequestStatusEndpoint.answer(requestID: "known", lookup: lookup)
        #expect(found == .init(status: 200, body: report.json))
        let missing = await RequestStatusEndpoint.answer(requestID: "unknown", lookup: lookup)
        #expect(missing.status == 404 && missing.body.hasPrefix(#"{"error":"not_found","message":"no request unknown in PostgreSQL"#))
        let empty = await RequestStatusEndpoint.answer(requestID: "", lookup: lookup)
        #expect(empty.status == 400 && empty.body.contains(#""error":"invalid_argument""#) && empty.body.contains("is required"))
        let long = await RequestStatusEndpoint.answer(requestID: String(repeating: "x", count: 5_000), lookup: lookup)
        #expect(long.status == 400 && long.body.contains("5000 bytes"))
        let control = await RequestStatusEndpoint.answer(requestID: "a\u{1}b", lookup: lookup)
        #expect(control.status == 400 && control.body.contains("control character"))
        let down = await RequestStatusEndpoint.answer(requestID: "known") { _ in throw Refused() }
        #expect(down == .init(status: 503, body: #"{"error":"unavailable","message":"PostgreSQL: connection refused"}"#))
    }
}

/// The reader on a real PostgreSQL: campaign rows, and immediate requests from send_log,
/// request_completions and pending_requests.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(2)))
struct RequestStatusReaderTests {
    @Test func immediateRequestsAreRunningCompletedOrCancelledAndUnknownOnesAreNotFound() async throws {
        let (campaigns, tokens, pool) = try await CampaignStoreTests.stores()
        try await withAsyncCleanup {
            func status(_ id: String) async throws -> RequestStatusReport? {
                try await pool.withConnection { try await RequestStatusReader.status(requestID: id, on: $0) }
            }
            #expect(try await status("status-nobody") == nil)

            var report = DeliveryReport()
            report.requestID = "status-immediate"
            for (token, outcome) in [("aa", DeliveryOutcome.delivered), ("bb", .delivered), ("cc", .rejected), ("dd", .skipped)] {
                report.deviceToken = token
                report.outcome = outcome
                _ = try await tokens.recordOutcome(report, event: [1])
            }
            let running = try #require(try await status("status-immediate"))
            #expect(running.state == .running && !running.isCampaign && running.completedAtMs == 0)
            #expect(running.counts == RequestStatusDecisionTests.counts(delivered: 2, rejected: 1, skipped: 1))

            try await tokens.recordCompletion(requestID: "status-immediate", eventID: FeedbackEventID.requestCompleted(requestID: "status-immediate"))
            let completed = try #require(try await status("status-immediate"))
            #expect(completed.state == .completed && completed.counts.processed == 4 && completed.completedAtMs > 0)

            report.requestID = "status-cancelled"
            report.outcome = .skipped
            _ = try await tokens.recordOutcome(report, event: [1])
            #expect(try await status("status-cancelled")?.cancelRequested == false)
            try await CancellationStore(pool: pool).record(requestID: "status-cancelled", reason: "test", requestedAtMs: 1)
            #expect(try await status("status-cancelled")?.cancelRequested == true)
            try await tokens.recordCompletion(requestID: "status-cancelled", eventID: "e", status: .cancelled)
            let cancelled = try #require(try await status("status-cancelled"))
            #expect(cancelled.state == .cancelled && cancelled.cancelRequested)
            #expect(try await status("status-immediate")?.cancelRequested == false)
            // A cancel alone (its request not seen yet) does not make a request known.
            try await CancellationStore(pool: pool).record(requestID: "status-cancel-only", reason: "test", requestedAtMs: 1)
            #expect(try await status("status-cancel-only") == nil)

            // A request whose only trace is its parked notifications' row.
            _ = try await pool.execute("INSERT INTO pending_requests (request_id, requested_at_ms) VALUES ('status-parked', 1)")
            let parked = try #require(try await status("status-parked"))
            #expect(parked.state == .running && parked.counts.processed == 0)

            // CampaignStore answers the same through its pool.
            #expect(try await campaigns.status(requestID: "status-immediate") == completed)
        } cleanup: {
            await pool.close()
        }
    }
}
