import Foundation
import Postgres
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// The `cancellations` table and its pollers on a real PostgreSQL (docs/campaigns.md "Cancellation"):
/// what one replica records, every other replica's process-wide set holds within the poll interval.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(2)))
struct CancellationStoreTests {
    static func store() async throws -> (CancellationStore, PostgresPool) {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 4))
        try await pool.start()
        try await TokenStore(pool: pool).migrate()
        _ = try await pool.execute("DELETE FROM cancellations")
        return (CancellationStore(pool: pool), pool)
    }

    static func poller(_ store: CancellationStore, _ set: CampaignCancellations, interval: Duration = .milliseconds(200),
                       lifetime: Duration = .seconds(3600), clock: any WallClock = SystemWallClock()) -> CancellationPoller {
        CancellationPoller(store: store, cancellations: set, interval: interval, lifetime: lifetime, clock: clock,
                           logger: Logger(label: "test.cancellations", logLevel: .error))
    }

    /// A cancel recorded by one replica (its `applyCancel`) is held by another replica's running
    /// poller within two poll intervals of the record's acknowledgement (the default is 200 ms), bounded
    /// here loosely because the other suites of the process share the cores.
    @Test func aCancelRecordedByAnotherReplicaIsKnownWithinOneSecond() async throws {
        let (store, pool) = try await Self.store()
        try await withAsyncCleanup {
            let here = CampaignCancellations()
            let poller = Self.poller(store, here, interval: DispatcherConfiguration(bootstrapServers: [], instanceID: "t").cancelPollInterval)
            try await poller.poll()
            let running = Task { try await poller.run(shutdown: GracefulShutdown()) }
            defer { running.cancel() }
            for index in 0..<5 {
                let id = "other-replica-\(index)"
                try await store.record(requestID: id, reason: "test", requestedAtMs: 1)
                let acknowledged = ContinuousClock.now
                _ = try await CampaignStoreTests.eventually("\(id) known here", timeout: .seconds(5)) { here.contains(id) ? true : nil }
                let took = ContinuousClock.now - acknowledged
                // Two poll intervals plus the statements make well under 1 s on an idle machine (0.19-0.21 s
                // measured); this target's other suites share the two cores, and 1.25 s was seen under them.
                #expect(took < .seconds(3), "\(id) known after \(took)")
            }
        } cleanup: {
            await pool.close()
        }
    }

    /// A row whose transaction commits after a later transaction's row was read is still read: the
    /// cursor waits for the oldest transaction running (a cursor on the last id read would skip it).
    @Test func aRowCommittedLateIsNotSkipped() async throws {
        let (store, pool) = try await Self.store()
        try await withAsyncCleanup {
            let here = CampaignCancellations()
            let poller = Self.poller(store, here)
            try await poller.poll()
            let slow = try await PostgresConnection.connect(try TestDatabase.url)
            _ = try await slow.execute("BEGIN")
            _ = try await slow.execute("INSERT INTO cancellations (request_id, requested_at_ms) VALUES ('late', 1)")
            try await store.record(requestID: "early", reason: "", requestedAtMs: 1)
            #expect(try await poller.poll() == 1)
            #expect(here.contains("early") && !here.contains("late"))
            _ = try await slow.execute("COMMIT")
            await slow.close()
            try await poller.poll()
            #expect(here.contains("late"))
        } cleanup: {
            await pool.close()
        }
    }

    /// A second record of the same request id keeps the first; a new replica reads every row within
    /// the lifetime at its start, page by page, and drops what is older.
    @Test func aStartingReplicaReadsEveryCancelWithinTheLifetime() async throws {
        let (store, pool) = try await Self.store()
        try await withAsyncCleanup {
            _ = try await pool.execute("""
                INSERT INTO cancellations (request_id, requested_at_ms)
                SELECT 'bulk-' || i, 1 FROM generate_series(1, 12000) AS i
                """)
            try await store.record(requestID: "old", reason: "first", requestedAtMs: 1)
            try await store.record(requestID: "old", reason: "second", requestedAtMs: 2)
            #expect(try await pool.query("SELECT reason FROM cancellations WHERE request_id = 'old'").first?.string("reason") == "first")
            _ = try await pool.execute("UPDATE cancellations SET recorded_at = now() - interval '2 hours' WHERE request_id = 'old'")
            let fresh = CampaignCancellations()
            // The 12,000 rows share one transaction: the page limit must not stop the read.
            #expect(try await Self.poller(store, fresh).poll() == 12_000)
            #expect(fresh.count == 12_000 && !fresh.contains("old") && fresh.contains("bulk-1") && fresh.contains("bulk-12000"))
            // Expiry by the dispatcher's clock: an hour later every one of them is older than the lifetime.
            let later = ManualWallClock(milliseconds: SystemWallClock().nowMilliseconds() + 3_601_000)
            let poller = Self.poller(store, fresh, clock: later)
            try await poller.poll()
            #expect(fresh.count == 0)
        } cleanup: {
            await pool.close()
        }
    }

    /// `SendLogRetention` deletes cancellations older than the retention, with the send log.
    @Test func theRetentionDeletesOldCancellations() async throws {
        let (store, pool) = try await Self.store()
        try await withAsyncCleanup {
            try await store.record(requestID: "kept", reason: "", requestedAtMs: 1)
            try await store.record(requestID: "gone", reason: "", requestedAtMs: 1)
            _ = try await pool.execute("UPDATE cancellations SET recorded_at = now() - interval '2 hours' WHERE request_id = 'gone'")
            try await SendLogRetention(pool: pool, retention: .seconds(3600)).deleteExpired()
            let left = try await pool.query("SELECT request_id FROM cancellations").compactMap { try $0.string("request_id") }
            #expect(left == ["kept"])
        } cleanup: {
            await pool.close()
        }
    }
}
