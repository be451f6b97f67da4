import Foundation
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// `SendLogWriter` on a real PostgreSQL: batches, rows that exist already, duplicates within a
/// batch, failures reaching every caller, and many concurrent callers.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(2)))
struct SendLogWriterTests {
    static func store() async throws -> (TokenStore, PostgresPool) {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 6))
        try await pool.start()
        let store = TokenStore(pool: pool)
        try await store.migrate()
        return (store, pool)
    }

    static func report(_ requestID: String, _ token: String, eventID: String = UUID().uuidString) -> DeliveryReport {
        var report = DeliveryReport()
        report.requestID = requestID
        report.deviceToken = token
        report.eventID = eventID
        report.outcome = .delivered
        report.httpStatus = 200
        report.apnsID = UUID().uuidString
        report.attempts = 1
        return report
    }

    static func count(_ pool: PostgresPool, requestPrefix: String) async throws -> Int {
        let rows = try await pool.query("SELECT count(*) AS n FROM send_log_all WHERE starts_with(request_id, $1)", [.string(requestPrefix)])
        return try rows.first?.int("n") ?? -1
    }

    @Test func aFullBatchIsWrittenAtOnceAndEveryByteSurvives() async throws {
        let (store, pool) = try await Self.store()
        // With an hour's interval, the records can only return because the third filled the batch.
        let writer = SendLogWriter(pool: pool, flushInterval: .seconds(3600), maxBatch: 3)
        let request = "full-\(UUID())"
        let allBytes = (0...255).map { UInt8($0) }
        let results = try await whileRunning(writer) {
            try await withThrowingTaskGroup(of: (Int, [UInt8]).self) { group in
                for i in 0..<3 {
                    group.addTask {
                        (i, try await writer.record(Self.report(request, "token-\(i)"), event: allBytes + [UInt8(i)]))
                    }
                }
                return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
        }
        #expect(results == [0: allBytes + [0], 1: allBytes + [1], 2: allBytes + [2]])
        let stored = try await store.recordedOutcomes(requestIDs: [request, "nothing-recorded"])
        #expect(stored == [request: ["token-0": allBytes + [0], "token-1": allBytes + [1], "token-2": allBytes + [2]]])
        await pool.close()
    }

    /// What a redelivery reads after a crash: the rows whose reports Kafka acknowledged are marked
    /// (and so not published again); marks queued when the writer stops gracefully are still written;
    /// with marks off, nothing is marked.
    @Test(arguments: [true, false])
    func acknowledgementMarksReachTheRowsARedeliveryReads(marks: Bool) async throws {
        let (store, pool) = try await Self.store()
        // An hour's mark interval: the marks can only be written by the graceful stop's flush.
        let writer = SendLogWriter(pool: pool, flushInterval: .milliseconds(1), marksAcknowledgements: marks,
                                   markInterval: .seconds(3600), maxMarkBatch: 100)
        let request = "marks-\(UUID())"
        try await whileRunning(writer) {
            for i in 0..<3 { _ = try await writer.record(Self.report(request, "token-\(i)"), event: [UInt8(i)]) }
            writer.markAcknowledged(requestID: request, deviceToken: "token-0")
            writer.markAcknowledged(requestID: request, deviceToken: "token-2")
            writer.markAcknowledged(requestID: "\(request)-never-recorded", deviceToken: "token-0")
        }
        let states = try await store.recordedOutcomeStates(requestIDs: [request])[request] ?? [:]
        #expect(states.mapValues(\.acknowledged) == ["token-0": marks, "token-1": false, "token-2": marks])
        #expect(writer.unflushedMarks == (marks ? 200 : 0))
        await pool.close()
    }

    @Test func aLoneRecordIsWrittenAfterTheFlushInterval() async throws {
        let (_, pool) = try await Self.store()
        let writer = SendLogWriter(pool: pool, flushInterval: .milliseconds(50))
        let clock = ContinuousClock()
        let start = clock.now
        let bytes = try await whileRunning(writer) { try await writer.record(Self.report("lone-\(UUID())", "t"), event: [7]) }
        #expect(bytes == [7])
        #expect(clock.now - start >= .milliseconds(50))
        await pool.close()
    }

    @Test func anExistingRowReturnsItsStoredBytes() async throws {
        let (store, pool) = try await Self.store()
        let request = "existing-\(UUID())"
        let first = Self.report(request, "t1")
        #expect(try await store.recordOutcome(first, event: [1, 1, 1]))
        let writer = SendLogWriter(pool: pool, flushInterval: .milliseconds(1))
        // A redelivered request records another outcome for the same token: the first one stands.
        try await whileRunning(writer) { () async throws in
            #expect(try await writer.record(Self.report(request, "t1"), event: [2, 2, 2]) == [1, 1, 1])
            #expect(try await writer.record(Self.report(request, "t2"), event: [3]) == [3])
        }
        #expect(try await store.recordedOutcomes(requestID: request) == ["t1": [1, 1, 1], "t2": [3]])
        await pool.close()
    }

    /// One batch mixing a key recorded before, new keys and a key twice: the statement inserts fewer
    /// rows than the batch has keys, so the stored reports are read back for all of them; each caller
    /// still gets its own bytes for a new key and the stored bytes for the old one.
    @Test func aBatchWithAnExistingKeyGivesEachCallerWhatIsStored() async throws {
        let (store, pool) = try await Self.store()
        let request = "mixed-\(UUID())"
        #expect(try await store.recordOutcome(Self.report(request, "old"), event: [0x01]))
        let writer = SendLogWriter(pool: pool, flushInterval: .seconds(3600), maxBatch: 4)
        let results = try await whileRunning(writer) {
            try await withThrowingTaskGroup(of: (String, [UInt8]).self) { group in
                group.addTask { ("old", try await writer.record(Self.report(request, "old"), event: [0x02])) }
                group.addTask { ("new", try await writer.record(Self.report(request, "new"), event: [0x03])) }
                group.addTask { ("twice-a", try await writer.record(Self.report(request, "twice"), event: [0x04])) }
                group.addTask { ("twice-b", try await writer.record(Self.report(request, "twice"), event: [0x05])) }
                return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
        }
        let stored = try await store.recordedOutcomes(requestID: request)
        #expect(results["old"] == [0x01] && stored["old"] == [0x01], "the earlier record stands")
        #expect(results["new"] == [0x03] && stored["new"] == [0x03])
        let twice = try #require(stored["twice"])
        #expect(twice == [0x04] || twice == [0x05])
        #expect(results["twice-a"] == twice && results["twice-b"] == twice)
        await pool.close()
    }

    @Test func duplicatesInOneBatchGetTheFirstBytes() async throws {
        let (store, pool) = try await Self.store()
        let writer = SendLogWriter(pool: pool, flushInterval: .seconds(3600), maxBatch: 3)
        let request = "dup-\(UUID())"
        let results = try await whileRunning(writer) {
            try await withThrowingTaskGroup(of: (String, [UInt8]).self) { group in
                group.addTask { ("a", try await writer.record(Self.report(request, "same"), event: [0xa])) }
                group.addTask { ("b", try await writer.record(Self.report(request, "same"), event: [0xb])) }
                group.addTask { ("c", try await writer.record(Self.report(request, "other"), event: [0xc])) }
                return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
        }
        let stored = try await store.recordedOutcomes(requestID: request)
        let same = try #require(stored["same"])
        #expect(same == [0xa] || same == [0xb])
        #expect(results["a"] == same && results["b"] == same, "both callers publish the stored bytes")
        #expect(results["c"] == [0xc] && stored["other"] == [0xc])
        await pool.close()
    }

    @Test func aFailedWriteFailsEveryCallerOfTheBatch() async throws {
        _ = try await Self.store()
        // A schema without send_log: the statement fails on the server (42P01 undefined_table).
        let pool = try await schemaPool("no_tables")
        let writer = SendLogWriter(pool: pool, flushInterval: .seconds(3600), maxBatch: 4)
        let failures = try await whileRunning(writer) {
            try await withThrowingTaskGroup(of: String?.self) { group in
                for i in 0..<4 {
                    group.addTask {
                        do {
                            _ = try await writer.record(Self.report("fail", "t\(i)"), event: [1])
                            return nil
                        } catch let error as PostgresError {
                            return error.sqlState
                        }
                    }
                }
                return try await group.reduce(into: [String?]()) { $0.append($1) }
            }
        }
        #expect(failures == Array(repeating: "42P01", count: 4))
        // A closed pool fails them too.
        await pool.close()
        let closed = SendLogWriter(pool: pool, flushInterval: .milliseconds(1))
        try await whileRunning(closed) { () async throws in
            await #expect(throws: PostgresError.self) { try await closed.record(Self.report("fail", "t"), event: [1]) }
        }
        // A NUL byte in a text field is refused at once, without poisoning a batch.
        let (_, good) = try await Self.store()
        let writer2 = SendLogWriter(pool: good, flushInterval: .milliseconds(1))
        try await whileRunning(writer2) { () async throws in
            await #expect(throws: PostgresError.self) { try await writer2.record(Self.report("nul\0", "t"), event: [1]) }
        }
        await good.close()
    }

    /// A batch's timer can fire and start writing before the caller that started it registered it
    /// (a caller preempted for the flush interval, as the campaign's lowered threads are on a busy
    /// machine). The caller must not then cancel it as stale: that cancelled the write in progress,
    /// and every caller of the batch got `CancellationError`. With a zero interval every timer fires
    /// at once; callers run on lowered threads, one lone row per batch.
    @Test func aTimerThatFiresBeforeItsStarterRegisteredItStillWrites() async throws {
        let (_, pool) = try await Self.store()
        let writer = SendLogWriter(pool: pool, flushInterval: .zero)
        let request = "lone-\(UUID())"
        let lowered = BackgroundTaskExecutor(name: "test-send-log", threads: 2, niceness: 19)
        let failures = try await whileRunning(writer) { await withTaskExecutorPreference(lowered) {
            await withTaskGroup(of: Int.self) { group in
                for caller in 0..<8 {
                    group.addTask {
                        var failures = 0
                        for i in 0..<250 {
                            do {
                                _ = try await writer.record(Self.report(request, "token-\(caller)-\(i)"), event: [UInt8(i % 256)])
                            } catch {
                                failures += 1
                            }
                        }
                        return failures
                    }
                }
                return await group.reduce(0, +)
            }
        } }
        #expect(failures == 0)
        #expect(try await Self.count(pool, requestPrefix: request) == 2_000)
        await pool.close()
    }

    @Test func twoThousandConcurrentRecordsEachGetTheirOwnBytes() async throws {
        let (_, pool) = try await Self.store()
        let writer = SendLogWriter(pool: pool)
        let request = "many-\(UUID())"
        let n = 2_000
        let mismatches = try await whileRunning(writer) {
            try await withThrowingTaskGroup(of: Bool.self) { group in
                for i in 0..<n {
                    group.addTask {
                        let bytes = Array("event-\(i)".utf8)
                        let report = Self.report("\(request)-\(i % 7)", "token-\(i)")
                        return try await writer.record(report, event: bytes) == bytes
                    }
                }
                return try await group.reduce(0) { $0 + ($1 ? 0 : 1) }
            }
        }
        #expect(mismatches == 0)
        #expect(try await Self.count(pool, requestPrefix: request) == n)
        await pool.close()
    }
}

/// `SendLogRetention` on a real PostgreSQL: rows past the retention go, newer ones stay.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(1)))
struct SendLogRetentionTests {
    static func insert(_ pool: PostgresPool, prefix: String, count: Int, age: String) async throws {
        try await pool.execute("""
            INSERT INTO send_log (request_id, device_token, event_id, outcome, report, completed_at)
            SELECT $1 || g, 't', 'e', 'DELIVERED', '\\x00'::bytea, now() - $2::interval
              FROM generate_series(1, $3::int) AS g
            """, [.string(prefix), .string(age), .int(count)])
    }

    static func remaining(_ pool: PostgresPool, prefix: String) async throws -> Int {
        try await pool.query("SELECT count(*) AS n FROM send_log WHERE starts_with(request_id, $1)", [.string(prefix)])
            .first?.int("n") ?? -1
    }

    @Test func deletesOnlyRowsPastTheRetentionInBatches() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url))
        try await pool.start()
        try await TokenStore(pool: pool).migrate()
        try await Self.insert(pool, prefix: "old-", count: 25, age: "9 days")
        try await Self.insert(pool, prefix: "recent-", count: 5, age: "7 days")
        try await Self.insert(pool, prefix: "new-", count: 3, age: "0 seconds")
        let retention = SendLogRetention(pool: pool, batchSize: 4)
        #expect(try await retention.deleteExpired() == 25)
        #expect(try await Self.remaining(pool, prefix: "old-") == 0)
        #expect(try await Self.remaining(pool, prefix: "recent-") == 5)
        #expect(try await retention.deleteExpired() == 0)
        // A shorter retention takes the 7-day rows as well.
        #expect(try await SendLogRetention(pool: pool, retention: .seconds(3600), batchSize: 2).deleteExpired() == 5)
        #expect(try await Self.remaining(pool, prefix: "new-") == 3)
        await pool.close()
    }

    @Test func runDeletesPeriodicallyAndStopsOnGracefulShutdown() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url))
        try await pool.start()
        try await TokenStore(pool: pool).migrate()
        let retention = SendLogRetention(pool: pool, retention: .seconds(60), batchSize: 10, interval: .milliseconds(20))
        let shutdown = GracefulShutdown()
        let loop = Task { await retention.run(shutdown: shutdown) }
        try await Self.insert(pool, prefix: "loop-", count: 15, age: "2 minutes")
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(20)
        while try await Self.remaining(pool, prefix: "loop-") > 0, clock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try await Self.remaining(pool, prefix: "loop-") == 0)
        shutdown.trigger()
        await loop.value
        await pool.close()
    }
}
