import APNs
import Foundation
import Postgres
import PushDomain
import PushMessages
import PushTestSupport
import Synchronization
import ServiceCore
import Testing

@testable import DispatcherCore

/// `pending_retries` on a real PostgreSQL: parked notifications round-trip everything needed to
/// send them again, replicas never claim the same row, a lease that passed lets another replica take
/// a row over, and a request completes only when its record is done and nothing of it is parked.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(1)))
struct PendingRetryStoreTests {
    static func store() async throws -> (PendingRetryStore, TokenStore, PostgresPool) {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 8))
        try await pool.start()
        let tokens = TokenStore(pool: pool)
        try await tokens.migrate()
        return (tokens.makePendingRetryStore(), tokens, pool)
    }

    static func retry(_ requestID: String, token: String = TokenStoreTests.token(), expiration: APNsExpiration = .omitted) throws -> PendingRetry {
        let request = APNsRequest(
            deviceToken: try DeviceToken(validating: token), topic: "com.example.app.voip", pushType: .voip, priority: APNsPriority(rawValue: 5),
            expiration: expiration, collapseID: "c-1", apnsID: APNsID.random(), payload: Array(#"{"aps":{"alert":"a\u0000b"}}"#.utf8) + [0xFF])
        var report = DeliveryReport()
        report.requestID = requestID
        report.deviceToken = token
        report.bundleID = "com.example.app"
        report.pushType = .voip
        report.userID = "u1"
        report.requestedAtMs = 1_700_000_000_123
        report.sentAtMs = 1_700_000_000_456
        report.apnsID = request.apnsID!.uuidString
        return PendingRetry(
            request: request, environment: .sandbox, report: report, traceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            retryDeadline: Date(timeIntervalSince1970: 1_900_000_000.5), attempts: 2, lastReason: "too_many_requests")
    }

    @Test func aParkedNotificationRoundTripsAndIsDueOnlyAfterItsDelay() async throws {
        let (store, _, pool) = try await Self.store()
        try await withAsyncCleanup {
            let later = try Self.retry("r-later")
            try await store.park(later, delay: .seconds(60))
            for expiration in [APNsExpiration.omitted, .immediately, .at(secondsSinceEpoch: 1_900_000_001)] {
                let parked = try Self.retry("r-now-\(expiration)", expiration: expiration)
                try await store.park(parked, delay: .zero)
                try await store.park(parked, delay: .zero)  // a second park changes nothing
                let claimed = try await store.claimDue(owner: "a", lease: .seconds(30), limit: 10)
                #expect(claimed == [parked])
            }
            #expect(try await store.count() == 4)
            let progress = try await store.progress(requestIDs: ["r-later", "r-unknown"])
            #expect(progress["r-later"]?.parked == [later.deviceToken])
            #expect(progress["r-unknown"] == nil)
            #expect(try await store.claimDue(owner: "a", lease: .seconds(30), limit: 10).isEmpty)
        } cleanup: {
            await pool.close()
        }
    }

    @Test func concurrentClaimersNeverShareARowAndALapsedLeaseIsTakenOver() async throws {
        let (store, _, pool) = try await Self.store()
        try await withAsyncCleanup {
            var parked: [PendingRetry] = []
            for _ in 0..<60 {
                let retry = try Self.retry("r-claim")
                parked.append(retry)
                try await store.park(retry, delay: .zero)
            }
            // Six replicas claim at once, ten rows at a time, until nothing is left.
            let claims = try await withThrowingTaskGroup(of: [String].self) { group in
                for owner in 0..<6 {
                    group.addTask {
                        var mine: [String] = []
                        while true {
                            let batch = try await store.claimDue(owner: "owner-\(owner)", lease: .seconds(30), limit: 10)
                            if batch.isEmpty { return mine }
                            mine += batch.map(\.deviceToken)
                        }
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(claims.count == 60)
            #expect(Set(claims) == Set(parked.map(\.deviceToken)))

            // A row whose claimer died is claimed again once its lease passed; the old claimer then
            // can neither delete nor reschedule it.
            let orphan = try Self.retry("r-orphan")
            try await store.park(orphan, delay: .zero)
            #expect(try await store.claimDue(owner: "dead", lease: .milliseconds(1), limit: 1) == [orphan])
            let deadline = ContinuousClock.now + .seconds(10)
            var takenOver: [PendingRetry] = []
            while takenOver.isEmpty, ContinuousClock.now < deadline {
                takenOver = try await store.claimDue(owner: "alive", lease: .seconds(30), limit: 1)
            }
            #expect(takenOver == [orphan])
            #expect(try await !store.remove(orphan, owner: "dead"))
            #expect(try await !store.reschedule(orphan, owner: "dead", delay: .zero, addingAttempts: 1, reason: "x"))
            #expect(try await store.remove(orphan, owner: "alive"))
        } cleanup: {
            await pool.close()
        }
    }

    @Test func aRescheduledRowCountsItsAttemptsAndWaitsItsDelay() async throws {
        let (store, _, pool) = try await Self.store()
        try await withAsyncCleanup {
            let retry = try Self.retry("r-again")
            try await store.park(retry, delay: .zero)
            #expect(try await store.claimDue(owner: "a", lease: .seconds(30), limit: 1).count == 1)
            #expect(try await store.reschedule(retry, owner: "a", delay: .milliseconds(300), addingAttempts: 3, reason: "server_error_503"))
            #expect(try await store.claimDue(owner: "b", lease: .seconds(30), limit: 1).isEmpty)
            let deadline = ContinuousClock.now + .seconds(10)
            var again: [PendingRetry] = []
            while again.isEmpty, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                again = try await store.claimDue(owner: "b", lease: .seconds(30), limit: 1)
            }
            #expect(again.first?.attempts == 5)
            #expect(again.first?.lastReason == "server_error_503")
        } cleanup: {
            await pool.close()
        }
    }

    @Test func aRequestCompletesOnceItsRecordIsDoneAndNothingOfItIsParked() async throws {
        let (store, tokens, pool) = try await Self.store()
        try await withAsyncCleanup {
            let first = try Self.retry("r-done"), second = try Self.retry("r-done")
            try await store.park(first, delay: .zero)
            try await store.park(second, delay: .zero)
            #expect(try await store.completion(requestID: "r-done")?.state == ParkedRequestCompletion(recordDone: false, parkedRemaining: 2))
            #expect(try await store.completion(requestID: "r-done")?.requestedAtMs == 1_700_000_000_123)
            try await store.markRecordDone(requestID: "r-done")
            _ = try await store.claimDue(owner: "a", lease: .seconds(30), limit: 10)
            for (retry, outcome) in [(first, DeliveryOutcome.delivered), (second, .failed)] {
                var report = retry.report
                report.outcome = outcome
                #expect(try await tokens.recordOutcome(report, event: report.serializedBytes()))
                #expect(try await store.remove(retry, owner: "a"))
            }
            let completion = try #require(try await store.completion(requestID: "r-done"))
            #expect(completion.state.isComplete)
            #expect(try await store.outcomeCounts(requestID: "r-done") == ["DELIVERED": 1, "FAILED": 1])
            // The recorded outcomes are what a redelivered record sees, nothing parked any more.
            let progress = try await store.progress(requestIDs: ["r-done"])
            #expect(progress["r-done"]?.parked.isEmpty == true)
            #expect(progress["r-done"]?.recorded.count == 2)
            try await store.forgetRequest(requestID: "r-done")
            #expect(try await store.completion(requestID: "r-done") == nil)
        } cleanup: {
            await pool.close()
        }
    }

    /// Every re-drive that records a request's last parked notification asks for its completion, and
    /// so does the record's own path: however many ask at once, one publishes; a failed publish
    /// leaves the completion to the next asker; the completion is then recorded for redeliveries.
    @Test func concurrentCompletionsPublishOnceAndAFailedPublishIsRetried() async throws {
        let (store, tokens, pool) = try await Self.store()
        try await withAsyncCleanup {
            let requestID = "r-once-\(UUID().uuidString)"
            let retry = try Self.retry(requestID)
            try await store.park(retry, delay: .zero)
            try await store.markRecordDone(requestID: requestID)
            _ = try await store.claimDue(owner: "a", lease: .seconds(30), limit: 100)
            var report = retry.report
            report.outcome = .delivered
            #expect(try await tokens.recordOutcome(report, event: report.serializedBytes()))
            #expect(try await store.remove(retry, owner: "a"))

            struct KafkaDown: Error {}
            await #expect(throws: KafkaDown.self) {
                _ = try await store.completeOnce(requestID: requestID, eventID: "e") { _, _, _ in throw KafkaDown() }
            }
            final class Published: Sendable { let counts = Mutex<[[String: Int]]>([]) }
            let published = Published()
            let winners = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        try await store.completeOnce(requestID: requestID, eventID: "e") { _, _, counts in
                            published.counts.withLock { $0.append(counts) }
                            try await Task.sleep(for: .milliseconds(100))  // a slow acknowledgement holds the row
                        }
                    }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(winners == 1)
            #expect(published.counts.withLock { $0 } == [["DELIVERED": 1]])
            #expect(try await tokens.completedRequests([requestID]) == [requestID])
            let again = try await store.completeOnce(requestID: requestID, eventID: "e") { _, _, _ in
                published.counts.withLock { $0.append([:]) }
            }
            #expect(!again && published.counts.withLock { $0.count } == 1)
        } cleanup: {
            await pool.close()
        }
    }
}
