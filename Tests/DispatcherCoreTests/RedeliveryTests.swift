import Foundation
import Postgres
import PushMessages
import PushTestSupport
import Testing

@testable import DispatcherCore

/// Collapse ids derived from the request id (docs/contracts.md "Collapse ids"): the same for every
/// copy of one request, only for alert pushes without a caller's collapse id, never when opted out.
@Suite struct RequestCollapseIDTests {
    static func notification(_ pushType: PushType, collapseID: String = "", optOut: Bool = false) -> PushMessages.Notification {
        PushMessages.Notification(bundleID: "com.example.app", pushType: pushType, collapseID: collapseID,
                     payload: pushType == .background ? #"{"aps":{"content-available":1}}"# : #"{"aps":{"alert":"hi"}}"#,
                     noRequestCollapseID: optOut)
    }

    @Test func pythonDerivesTheSameID() async throws {
        let ids = ["req-1", "réq ✓", "", String(repeating: "x", count: 300)]
        let script = """
            import base64, hashlib, sys
            for rid in sys.argv[1:]:
                print(base64.urlsafe_b64encode(hashlib.sha256(rid.encode()).digest()[:16]).decode().rstrip("="))
            """
        let result = try await runProgram(["python3", "-c", script] + ids, environment: ["PYTHONUTF8": "1"])
        #expect(result.status == 0, "\(result.output)")
        // An empty request id prints an empty argument line too: compare line by line.
        let python = result.output.split(separator: "\n", omittingEmptySubsequences: false).prefix(ids.count).map(String.init)
        #expect(python == ids.map { RequestCollapseID.derived(requestID: $0) })
        #expect(ids.allSatisfy { RequestCollapseID.derived(requestID: $0).utf8.count == 22 })
        #expect(RequestCollapseID.derived(requestID: "req-1") != RequestCollapseID.derived(requestID: "req-2"))
    }

    @Test func alertPushesWithoutACallerCollapseIDGetTheDerivedOne() throws {
        let token = NotificationTemplate.placeholderToken
        let alert = try NotificationTemplate(Self.notification(.alert), requestID: "req-1")
        #expect(alert.request(for: token).collapseID == RequestCollapseID.derived(requestID: "req-1"))
        #expect(alert.request(for: token).headers().contains { $0.name == "apns-collapse-id" && $0.value.utf8.count == 22 })
        // Every copy of one request carries the same id: a resend replaces the first while it is shown.
        #expect(try NotificationTemplate(Self.notification(.alert), requestID: "req-1").collapseID == alert.collapseID)
    }

    @Test func theCallersCollapseIDOptOutAndOtherPushTypesAreLeftAlone() throws {
        #expect(try NotificationTemplate(Self.notification(.alert, collapseID: "score"), requestID: "r").collapseID == "score")
        #expect(try NotificationTemplate(Self.notification(.alert, optOut: true), requestID: "r").collapseID == nil)
        for type in [PushType.background, .voip, .liveactivity] {
            #expect(try NotificationTemplate(Self.notification(type), requestID: "r").collapseID == nil, "\(type)")
        }
    }
}

/// What a request handled again remembers: reports acknowledged in this process (bounded).
@Suite struct AcknowledgedReportsTests {
    @Test func remembersReportsUntilTheRequestIsForgotten() {
        let reports = AcknowledgedReports()
        reports.insert(requestID: "a", token: "t1")
        reports.insert(requestID: "a", token: "t1")
        reports.insert(requestID: "b", token: "t1")
        #expect(reports.contains(requestID: "a", token: "t1") && reports.contains(requestID: "b", token: "t1"))
        #expect(!reports.contains(requestID: "a", token: "t2"))
        #expect(reports.count == 2)
        reports.remove(requestID: "a")
        #expect(!reports.contains(requestID: "a", token: "t1") && reports.contains(requestID: "b", token: "t1"))
        #expect(reports.count == 1)
    }

    @Test func pastTheBoundTheOldestRequestsAreForgottenFirst() {
        let reports = AcknowledgedReports(maxReports: 5)
        for token in ["1", "2", "3"] { reports.insert(requestID: "old", token: token) }
        for token in ["1", "2"] { reports.insert(requestID: "newer", token: token) }
        #expect(reports.count == 5)
        reports.insert(requestID: "newest", token: "1")
        #expect(!reports.contains(requestID: "old", token: "1"))
        #expect(reports.contains(requestID: "newer", token: "2") && reports.contains(requestID: "newest", token: "1"))
        #expect(reports.count == 3)
    }

    @Test func forgettingIsConstantTimeAndTheEvictionOrderStaysBounded() {
        let reports = AcknowledgedReports(maxReports: 100)
        // 100,000 requests come and go (what a busy process sees); a few stay.
        for n in 0..<100_000 {
            reports.insert(requestID: "r\(n)", token: "t")
            if n % 1_000 != 0 { reports.remove(requestID: "r\(n)") }
        }
        // r0, r1000 … r99000 were kept; inserting r99001 beside all 100 of them passed the bound
        // once, and the oldest, r0, went.
        #expect(reports.count == 99)
        #expect(reports.orderLength <= 2 * 99 + 64)
        #expect(!reports.contains(requestID: "r0", token: "t"))
        #expect(reports.contains(requestID: "r1000", token: "t") && reports.contains(requestID: "r99000", token: "t"))
        // A request forgotten and remembered again counts from its new insertion: 99 newer requests
        // push out the 98 older ones, not it.
        reports.remove(requestID: "r99000")
        reports.insert(requestID: "r99000", token: "t2")
        for n in 0..<99 { reports.insert(requestID: "late\(n)", token: "t") }
        #expect(reports.count == 100)
        #expect(reports.contains(requestID: "r99000", token: "t2") && !reports.contains(requestID: "r98000", token: "t"))
    }
}

/// `request_completions` on a real PostgreSQL: a finished request is found again, and goes with the
/// send_log retention.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(1)))
struct RequestCompletionStoreTests {
    @Test func aCompletionIsRecordedOnceAndFoundInOneQuery() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url))
        try await pool.start()
        let store = TokenStore(pool: pool)
        try await store.migrate()
        #expect(try await store.completedRequests(["r1", "r2"]).isEmpty)
        try await store.recordCompletion(requestID: "r1", eventID: FeedbackEventID.requestCompleted(requestID: "r1"))
        try await store.recordCompletion(requestID: "r1", eventID: FeedbackEventID.requestCompleted(requestID: "r1"))
        #expect(try await store.completedRequests(["r1", "r2", "r1"]) == ["r1"])
        #expect(try await store.completedRequests([]).isEmpty)
        // Many in one statement; one already recorded and one listed twice are recorded once.
        try await store.recordCompletions([("r1", "other", .completed), ("r2", "e2", .cancelled), ("r3", "e3", .completed), ("r3", "e3", .completed)])
        #expect(try await store.completedRequests(["r1", "r2", "r3", "r4"]) == ["r1", "r2", "r3"])
        let kept = try await pool.query("SELECT event_id FROM request_completions WHERE request_id = 'r1'")
        #expect(try kept.compactMap { try $0.string("event_id") } == [FeedbackEventID.requestCompleted(requestID: "r1")])
        await pool.close()
    }

    @Test func completionsPastTheRetentionAreDeleted() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url))
        try await pool.start()
        let store = TokenStore(pool: pool)
        try await store.migrate()
        try await pool.execute("""
            INSERT INTO request_completions (request_id, event_id, completed_at)
            SELECT 'old-' || g, 'e', now() - interval '9 days' FROM generate_series(1, 7) AS g
            """)
        try await store.recordCompletion(requestID: "fresh", eventID: "e")
        #expect(try await SendLogRetention(pool: pool, batchSize: 3).deleteExpired() == 7)
        #expect(try await store.completedRequests((1...7).map { "old-\($0)" } + ["fresh"]) == ["fresh"])
        await pool.close()
    }
}
