import Foundation
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// The decisions of `send_log_v2` without I/O: days, partition names, which days to create and drop,
/// and how long the old table's answer is trusted (docs/send-log.md "Two tables during the transition").
@Suite struct SendLogV2DecisionTests {
    @Test func daysAreUTCCalendarDaysAndNameTheirPartitions() {
        #expect(SendLogDay(milliseconds: 0).description == "1970-01-01")
        #expect(SendLogDay(milliseconds: -1).description == "1969-12-31")
        // 2026-12-04T23:59:59.999Z and the next millisecond.
        #expect(SendLogDay(milliseconds: 1_796_428_799_999).description == "2026-12-04")
        #expect(SendLogDay(milliseconds: 1_796_428_800_000).description == "2026-12-05")
        #expect(SendLogDay(milliseconds: 1_709_164_800_000).description == "2024-02-29")
        let day = SendLogDay(milliseconds: 1_796_428_799_999)
        #expect(day.partitionName == "send_log_v2_20261204")
        #expect(SendLogDay(partitionName: "send_log_v2_20261204") == day)
        #expect(SendLogDay(partitionName: "send_log_v2_20240229") == SendLogDay(milliseconds: 1_709_164_800_000))
        #expect(day.next.startMilliseconds == 1_796_428_800_000)
        for name in ["send_log_v2_default", "send_log_v2_20261304", "send_log_v2_20230229", "send_log_v2_2026120", "other_20261204"] {
            #expect(SendLogDay(partitionName: name) == nil, "\(name)")
        }
    }

    @Test func thePlanCreatesTodayAndTheDaysAheadAndDropsOnlyWholeExpiredDays() {
        let now: Int64 = 1_796_428_799_999 - 3_600_000  // 2026-12-04T22:59:59.999Z
        let today = SendLogDay(milliseconds: now)
        func day(_ offset: Int64) -> SendLogDay { SendLogDay(number: today.number + offset) }
        let plan = SendLogPlanFixture.plan(existing: [day(-9), day(-8), day(-1), day(0), day(2)], now: now, ahead: 3, retentionDays: 8)
        #expect(plan.create == [day(1), day(3)])
        // Day -8 ends at 2026-11-27T00:00Z, 7 days 23 hours ago: younger than 8 days, it stays.
        #expect(plan.drop == [day(-9)])
        #expect(SendLogPlanFixture.plan(existing: [day(-100)], now: now, ahead: 0, retentionDays: nil).drop == [])
        #expect(SendLogPlanFixture.plan(existing: [], now: now, ahead: 0, retentionDays: nil).create == [today])
        // A zero retention never drops today's partition.
        #expect(SendLogPlanFixture.plan(existing: [day(-1), day(0)], now: now, ahead: 0, retentionDays: 0).drop == [day(-1)])
    }

    @Test func theOldTablesAnswerIsTrustedForTheRecheckInterval() {
        var check = LegacySendLogCheck(recheckInterval: .seconds(60))
        let start = ContinuousClock.now
        #expect(check.answer(at: start) == nil)
        check.record(hasRows: true, at: start)
        #expect(check.answer(at: start + .seconds(59)) == true)
        #expect(check.answer(at: start + .seconds(60)) == nil)
        check.record(hasRows: false, at: start + .seconds(60))
        #expect(check.answer(at: start + .seconds(61)) == false)
        #expect(check.answer(at: start + .seconds(121)) == nil)
    }
}

enum SendLogPlanFixture {
    static func plan(existing: Set<SendLogDay>, now: Int64, ahead: Int, retentionDays: Int64?) -> SendLogPartitionPlan {
        SendLogPartitionPlan(existing: existing, nowMs: now, daysAhead: ahead, retention: retentionDays.map { .seconds($0 * 86_400) })
    }
}

/// `send_log_v2` beside `send_log` on a real PostgreSQL.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(3)))
struct SendLogV2Tests {
    static let dayMs = SendLogDay.milliseconds

    static func report(_ requestID: String, _ token: String, requestedAtMs: Int64) -> DeliveryReport {
        var report = SendLogWriterTests.report(requestID, token)
        report.requestedAtMs = requestedAtMs
        return report
    }

    /// A schema of its own, emptied first, with the migrations up to `through` applied (all: nil).
    static func freshSchema(_ name: String, through: Int? = nil, connections: Int = 4) async throws -> PostgresPool {
        _ = try await TestDatabase.withConnection { try await $0.execute("DROP SCHEMA IF EXISTS \(name) CASCADE") }
        let pool = try await schemaPool(name, maximumConnections: connections)
        if let through {
            try await PostgresMigrator(migrations: TokenStoreMigrations.all.filter { $0.version <= through }).migrate(using: pool)
        } else {
            try await TokenStore(pool: pool).migrate()
        }
        return pool
    }

    static func int(_ pool: PostgresPool, _ sql: String, _ parameters: [PostgresValue?] = []) async throws -> Int {
        try await pool.query(sql, parameters).first?.int("n") ?? -1
    }

    static func partitions(_ pool: PostgresPool) async throws -> [String] {
        try await pool.query("""
            SELECT c.relname::text AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'send_log_v2'::regclass ORDER BY 1
            """).compactMap { try $0.string("name") }
    }

    /// One row per (request, token) whatever writes it: a redelivery late the next day (same
    /// `requested_at_ms`), a parked retry's later settlement, a one-by-one record; every later
    /// caller gets the first bytes, and the row sits in the request's day.
    @Test func oneRowPerRequestAndTokenAcrossRedeliveries() async throws {
        let (store, pool) = try await SendLogWriterTests.store()
        let request = "v2-redelivered-\(UUID())"
        let requestedAt = (Int64(Date().timeIntervalSince1970 * 1000) / Self.dayMs - 1) * Self.dayMs + 1_000  // yesterday 00:00:01Z
        let writer = SendLogWriter(pool: pool, flushInterval: .milliseconds(1))
        let results = try await whileRunning(writer) {
            var results: [[UInt8]] = []
            for bytes: UInt8 in [1, 2, 3] { results.append(try await writer.record(Self.report(request, "t", requestedAtMs: requestedAt), event: [bytes])) }
            return results
        }
        #expect(results == [[1], [1], [1]])
        #expect(try await !store.recordOutcome(Self.report(request, "t", requestedAtMs: requestedAt), event: [4]))
        let rows = try await pool.query(
            "SELECT request_day::text AS day, report, tableoid::regclass::text AS part FROM send_log_v2 WHERE request_id = $1", [.string(request)])
        #expect(rows.count == 1)
        let day = SendLogDay(milliseconds: requestedAt)
        #expect(try rows.first?.string("day") == day.description)
        // Yesterday's partition exists only if a pass created it then; else the row is in the DEFAULT.
        let part = try rows.first?.string("part") ?? ""
        #expect([day.partitionName, "send_log_v2_default"].contains(part))
        #expect(try await store.recordedOutcomes(requestID: request) == ["t": [1]])
        await pool.close()
    }

    /// A request begun before the upgrade and redelivered after it: its rows in the old table count
    /// (the writer publishes their bytes and writes no second row, readers see them, marks reach them),
    /// its other tokens go to `send_log_v2`.
    @Test func aRowOfTheOldTableStillCounts() async throws {
        let (store, pool) = try await SendLogWriterTests.store()
        let request = "v2-old-\(UUID())"
        try await pool.execute("""
            INSERT INTO send_log (request_id, device_token, event_id, outcome, report) VALUES ($1, 'old', 'e', 'DELIVERED', '\\x0a'::bytea)
            """, [.string(request)])
        let writer = SendLogWriter(pool: pool, flushInterval: .milliseconds(1))
        let (old, new) = try await whileRunning(writer) {
            let old = try await writer.record(Self.report(request, "old", requestedAtMs: 0), event: [0xb])
            let new = try await writer.record(Self.report(request, "new", requestedAtMs: 0), event: [0xc])
            writer.markAcknowledged(requestID: request, deviceToken: "old")
            return (old, new)
        }
        #expect(old == [0xa], "the old table's bytes are published again, never new ones")
        #expect(new == [0xc])
        #expect(try await Self.int(pool, "SELECT count(*) AS n FROM send_log_v2 WHERE request_id = $1 AND device_token = 'old'", [.string(request)]) == 0)
        #expect(try await !store.recordOutcome(Self.report(request, "old", requestedAtMs: 0), event: [0xd]))
        let states = try await store.recordedOutcomeStates(requestID: request)
        #expect(states.mapValues(\.event) == ["old": [0xa], "new": [0xc]])
        #expect(states["old"]?.acknowledged == true && states["new"]?.acknowledged == false)
        let progress = try await PendingRetryStore(pool: pool).progress(requestIDs: [request])[request]
        #expect(progress?.recorded.keys.sorted() == ["new", "old"])
        #expect(try await PendingRetryStore(pool: pool).outcomeCounts(requestID: request) == ["DELIVERED": 2])
        await pool.close()
    }

    /// Retention drops whole days past it and leaves the younger ones; a day created ahead takes the
    /// rows the DEFAULT partition held for it.
    @Test func retentionDropsAnExpiredDayAndLeavesYoungerOnes() async throws {
        let pool = try await Self.freshSchema("send_log_v2_retention")
        let store = TokenStore(pool: pool)
        let todayNumber = SendLogDay(milliseconds: Int64(Date().timeIntervalSince1970 * 1000)).number
        let old = SendLogDay(number: todayNumber - 20), young = SendLogDay(number: todayNumber - 2), ahead = SendLogDay(number: todayNumber + 10)
        try await pool.withTransaction { connection in
            for day in [old, young] { try await SendLogPartitions.create(day, on: connection) }
        }
        for (index, day) in [old, young, ahead].enumerated() {
            #expect(try await store.recordOutcome(Self.report("r\(index)", "t", requestedAtMs: day.startMilliseconds + 5), event: [UInt8(index)]))
        }
        #expect(try await Self.int(pool, "SELECT count(*) AS n FROM send_log_v2_default") == 1)
        let plan = try await SendLogPartitions(pool: pool, retention: .seconds(8 * 86_400), daysAhead: 10).ensure()
        #expect(plan.drop == [old])
        #expect(plan.create.count == 7 && plan.create.contains(ahead), "days 4 to 10 ahead")
        let names = try await Self.partitions(pool)
        #expect(!names.contains(old.partitionName) && names.contains(young.partitionName) && names.contains(ahead.partitionName))
        #expect(try await store.recordedOutcomes(requestIDs: ["r0", "r1", "r2"]) == ["r1": ["t": [1]], "r2": ["t": [2]]])
        #expect(try await Self.int(pool, "SELECT count(*) AS n FROM send_log_v2_default") == 0)
        #expect(try await Self.int(pool, "SELECT count(*) AS n FROM \(ahead.partitionName)") == 1)
        // Again: nothing left to do.
        let again = try await SendLogPartitions(pool: pool, retention: .seconds(8 * 86_400), daysAhead: 10).ensure()
        #expect(again.create.isEmpty && again.drop.isEmpty)
        await pool.close()
    }

    /// Replicas starting at once: each day is created once, no pass fails.
    @Test func replicasCreatingPartitionsAtOnceCreateEachDayOnce() async throws {
        let setup = try await Self.freshSchema("send_log_v2_replicas", through: 14)
        #expect(try await Self.partitions(setup) == ["send_log_v2_default"])
        await setup.close()
        let pools = try await (0..<4).asyncMap { _ in try await schemaPool("send_log_v2_replicas", maximumConnections: 1) }
        let plans = try await withThrowingTaskGroup(of: SendLogPartitionPlan.self) { group in
            for pool in pools { group.addTask { try await SendLogPartitions(pool: pool, retention: nil, daysAhead: 3).ensure() } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let created = plans.flatMap(\.create)
        #expect(created.count == 4 && Set(created).count == 4)
        #expect(try await Self.partitions(pools[0]).count == 5)
        for pool in pools { await pool.close() }
    }

    /// Migration 14 on a database holding old rows: the old table is not rewritten (same file) and
    /// its rows read through `send_log_all`.
    @Test func theMigrationKeepsTheOldTableAndItsRows() async throws {
        let pool = try await Self.freshSchema("send_log_v2_upgrade", through: 13)
        try await pool.execute("""
            INSERT INTO send_log (request_id, device_token, event_id, outcome, report, acknowledged)
            SELECT 'before', 't' || g, 'e', 'DELIVERED', '\\x01'::bytea, g % 2 = 0 FROM generate_series(1, 100) AS g
            """)
        let fileBefore = try await pool.query("SELECT pg_relation_filenode('send_log')::text AS f").first?.string("f")
        try await TokenStore(pool: pool).migrate()
        let fileAfter = try await pool.query("SELECT pg_relation_filenode('send_log')::text AS f").first?.string("f")
        #expect(fileBefore != nil && fileBefore == fileAfter)
        let states = try await TokenStore(pool: pool).recordedOutcomeStates(requestID: "before")
        #expect(states.count == 100 && states.values.filter(\.acknowledged).count == 50)
        #expect(try await Self.partitions(pool).count == 5, "DEFAULT, today and 3 days ahead")
        await pool.close()
    }
}

private extension Range where Bound == Int {
    func asyncMap<T>(_ transform: (Int) async throws -> T) async throws -> [T] {
        var result: [T] = []
        for i in self { result.append(try await transform(i)) }
        return result
    }
}

/// The redelivery look-up that reads only the request's day of `send_log_v2` when its
/// `created_at_ms` gives it (`PendingRetryStore.progress(_:limit:)`).
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(2)))
struct SendLogV2DatedProgressTests {
    @Test func aDatedReadFindsItsDaysRowsAndTheOldTables() async throws {
        let (store, pool) = try await SendLogWriterTests.store()
        let parking = PendingRetryStore(pool: pool)
        let dated = "v2-dated-\(UUID())", undated = "v2-undated-\(UUID())"
        let requestedAt = Int64(Date().timeIntervalSince1970 * 1000) - 3 * SendLogDay.milliseconds
        try await pool.execute("""
            INSERT INTO send_log (request_id, device_token, event_id, outcome, report) VALUES ($1, 'old', 'e', 'DELIVERED', '\\x0a'::bytea)
            """, [.string(dated)])
        #expect(try await store.recordOutcome(SendLogV2Tests.report(dated, "new", requestedAtMs: requestedAt), event: [0xb]))
        #expect(try await store.recordOutcome(SendLogV2Tests.report(undated, "t", requestedAtMs: requestedAt), event: [0xc]))
        let reads = [PendingRetryStore.ProgressRead(requestID: dated, requestedAtMs: requestedAt),
                     PendingRetryStore.ProgressRead(requestID: undated, requestedAtMs: 0)]
        let found = try await parking.progress(reads, limit: 10)
        #expect(found[dated]?.recorded.mapValues(\.event) == ["old": [0xa], "new": [0xb]])
        #expect(found[undated]?.recorded.mapValues(\.event) == ["t": [0xc]])
        #expect(found[dated]?.complete == true)
        // Another day reads another partition: the row is not there (the read is by day), the old table's is.
        let otherDay = [PendingRetryStore.ProgressRead(requestID: dated, requestedAtMs: requestedAt + SendLogDay.milliseconds)]
        #expect(try await parking.progress(otherDay, limit: 10)[dated]?.recorded.keys.sorted() == ["old"])
        // The limit marks a request whose rows reach it as not complete.
        #expect(try await parking.progress(reads, limit: 2)[dated]?.complete == false)
        await pool.close()
    }

    /// A campaign's read of earlier outcomes after a cursor (`PendingRetryStore.outcomes(of:after:limit:)`):
    /// per table in token order, complete through the smallest last token of a table that reached the
    /// limit and to the end when none did; the day's partition only when the day is known.
    @Test func outcomesAfterACursorAreReadInTokenOrderAChunkAtATime() async throws {
        let (store, pool) = try await SendLogWriterTests.store()
        try await withAsyncCleanup {
            let parking = PendingRetryStore(pool: pool)
            let request = "after-\(UUID())"
            let requestedAt = Int64(Date().timeIntervalSince1970 * 1000)
            func token(_ i: Int) -> String { String(format: "%064x", i) }
            // send_log_v2 holds 1, 2, 4 and 6; the old send_log 3; pending_retries 5 and 7.
            for i in [1, 2, 4, 6] {
                #expect(try await store.recordOutcome(SendLogV2Tests.report(request, token(i), requestedAtMs: requestedAt), event: [UInt8(i)]))
            }
            try await pool.execute("""
                INSERT INTO send_log (request_id, device_token, event_id, outcome, report) VALUES ($1, $2, 'e', 'DELIVERED', '\\x03'::bytea)
                """, [.string(request), .string(token(3))])
            for i in [5, 7] { try await parking.park(PendingRetryStoreTests.retry(request, token: token(i)), delay: .seconds(60)) }
            let read = PendingRetryStore.ProgressRead(requestID: request, requestedAtMs: requestedAt)
            // Limit 2: send_log_v2 gives 2 and 4 (full), send_log 3, pending_retries 5 and 7 (full).
            let first = try await parking.outcomes(of: read, after: token(1), limit: 2)
            #expect(first.coveredThrough == token(4))
            #expect(first.progress.recorded.mapValues(\.event) == [token(2): [2], token(3): [3], token(4): [4]])
            #expect(first.progress.parked == [token(5), token(7)])
            let second = try await parking.outcomes(of: read, after: token(4), limit: 2)
            #expect(second.coveredThrough == token(7), "pending_retries reached the limit again")
            #expect(second.progress.recorded.mapValues(\.event) == [token(6): [6]] && second.progress.parked == [token(5), token(7)])
            #expect(try await parking.outcomes(of: read, after: token(7), limit: 2) == PendingRetryStore.OutcomeChunk())
            // Undated: every partition. Another day: that day's partition, so only the old table's row.
            let undated = try await parking.outcomes(of: .init(requestID: request, requestedAtMs: 0), after: "", limit: 10)
            #expect(undated.progress.recorded.count == 5 && undated.coveredThrough == nil)
            let otherDay = PendingRetryStore.ProgressRead(requestID: request, requestedAtMs: requestedAt + SendLogDay.milliseconds)
            let found = try await parking.outcomes(of: otherDay, after: "", limit: 10)
            #expect(Set(found.progress.recorded.keys) == [token(3)] && found.progress.parked.count == 2)
        } cleanup: {
            await pool.close()
        }
    }

    /// The same read says which requests finished before (`request_completions`), dated or not, with
    /// or without outcomes and parked tokens, and no other: the look-up a redelivered request makes
    /// before sending anything, in one statement.
    @Test func theReadSaysWhichRequestsCompletedBefore() async throws {
        let (store, pool) = try await SendLogWriterTests.store()
        let parking = PendingRetryStore(pool: pool)
        let requestedAt = Int64(Date().timeIntervalSince1970 * 1000)
        let id = UUID().uuidString
        let (doneDated, doneUndated, doneEmpty, open) = ("done-dated-\(id)", "done-undated-\(id)", "done-empty-\(id)", "open-\(id)")
        #expect(try await store.recordOutcome(SendLogV2Tests.report(doneDated, "t1", requestedAtMs: requestedAt), event: [0x1]))
        #expect(try await store.recordOutcome(SendLogV2Tests.report(doneUndated, "t2", requestedAtMs: requestedAt), event: [0x2]))
        #expect(try await store.recordOutcome(SendLogV2Tests.report(open, "t3", requestedAtMs: requestedAt), event: [0x3]))
        try await store.recordCompletions([(doneDated, "e1", .completed), (doneUndated, "e2", .cancelled), (doneEmpty, "e3", .completed)])
        let reads = [PendingRetryStore.ProgressRead(requestID: doneDated, requestedAtMs: requestedAt),
                     PendingRetryStore.ProgressRead(requestID: doneUndated, requestedAtMs: 0),
                     PendingRetryStore.ProgressRead(requestID: doneEmpty, requestedAtMs: requestedAt),
                     PendingRetryStore.ProgressRead(requestID: open, requestedAtMs: requestedAt),
                     PendingRetryStore.ProgressRead(requestID: "never-\(id)", requestedAtMs: requestedAt)]
        let found = try await parking.progress(reads, limit: 10)
        #expect(found[doneDated]?.completed == true)
        #expect(found[doneUndated]?.completed == true)
        #expect(found[doneEmpty]?.completed == true)
        #expect(found[open]?.completed == false)
        #expect(found["never-\(id)"] == nil)
        // Completion and outcomes are both read: the completion row adds no outcome.
        #expect(found[doneDated]?.recorded.mapValues(\.event) == ["t1": [0x1]])
        #expect(found[doneUndated]?.recorded.mapValues(\.event) == ["t2": [0x2]])
        #expect(found[doneEmpty]?.recorded.isEmpty == true)
        #expect(found[open]?.recorded.mapValues(\.event) == ["t3": [0x3]])
        await pool.close()
    }
}

/// The cost of the progress look-up does not grow with its day partition, whatever the statistics
/// say: on a partition holding one fan-out of 4,000 rows (a handful of distinct request ids, analyzed),
/// the prepared statement's generic plan reads `send_log_v2` by primary key, never by a sequential scan
/// of the partition. With the plain `LIMIT` the plan chose that scan for every look-up (1,658 µs of
/// PostgreSQL CPU per single-token request in `scripts/bench-e2e` (a) after 60,000 rows of the day).
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(2)))
struct SendLogV2ProgressPlanTests {
    @Test func theProgressReadUsesThePrimaryKeyOnAPartitionOfFewLargeRequests() async throws {
        let (_, pool) = try await SendLogWriterTests.store()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let partition = SendLogDay(milliseconds: now).partitionName
        try await pool.execute("""
            INSERT INTO send_log_v2 (request_id, device_token, request_day, outcome, http_status, apns_reason, attempts, report)
            SELECT 'v2-plan-fan-out', lpad(to_hex(n), 64, '0'), (now() AT TIME ZONE 'UTC')::date, 'DELIVERED', 200, '', 1, '\\x0a'::bytea
              FROM generate_series(1, 4000) AS n
            """)
        try await pool.execute("ANALYZE \(partition)")
        let plan = try await pool.withConnection { connection in
            _ = try await connection.execute("SET plan_cache_mode = force_generic_plan")
            _ = try await connection.execute("PREPARE progress_plan(text[], integer, text[], bigint[]) AS \(PendingRetryStore.progressSQL)")
            let rows = try await connection.query("EXPLAIN EXECUTE progress_plan('{v2-plan-undated}', 1000, '{v2-plan-dated}', '{\(now)}')")
            _ = try await connection.execute("DEALLOCATE progress_plan")
            _ = try await connection.execute("RESET plan_cache_mode")
            return try rows.map { try $0.string("QUERY PLAN") ?? "" }
        }
        #expect(plan.contains { $0.contains("Index") && $0.contains(partition) }, "the day partition is read: \(plan)")
        #expect(!plan.contains { $0.contains("Seq Scan") && $0.contains("send_log") }, "no sequential scan of send_log: \(plan.joined(separator: "\n"))")
        await pool.close()
    }

    /// The project's sessions never JIT-compile (`jit=off`, set by `PostgresConnection.connect`),
    /// whatever a statement's estimated cost. PostgreSQL compiles a statement whose estimate passes
    /// `jit_above_cost` again at every execution: on a day partition of a few large fan-outs the
    /// progress read of 500 request ids was estimated at 657,562 and compiled for 575 ms of server CPU
    /// each time, while it read no row (`scripts/bench-e2e` (a) fell to 1,070 requests/s). Here every
    /// threshold is 0, so any session with JIT on compiles the read (where the server has JIT), and
    /// the project's session does not.
    @Test func theProgressReadIsNeverCompiledByJIT() async throws {
        let (_, pool) = try await SendLogWriterTests.store()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        func plan(_ connection: PostgresConnection) async throws -> [String] {
            for setting in ["jit_above_cost", "jit_inline_above_cost", "jit_optimize_above_cost"] {
                _ = try await connection.execute("SET \(setting) = 0")
            }
            _ = try await connection.execute("PREPARE progress_jit(text[], integer, text[], bigint[]) AS \(PendingRetryStore.progressSQL)")
            let rows = try await connection.query("EXPLAIN (ANALYZE) EXECUTE progress_jit('{}', 1000, '{v2-jit-a,v2-jit-b}', '{\(now),\(now)}')")
            _ = try await connection.execute("DEALLOCATE progress_jit")
            for setting in ["jit_above_cost", "jit_inline_above_cost", "jit_optimize_above_cost"] {
                _ = try await connection.execute("RESET \(setting)")
            }
            return try rows.map { try $0.string("QUERY PLAN") ?? "" }
        }
        let ours = try await pool.withConnection { try await plan($0) }
        #expect(!ours.contains { $0.contains("JIT") }, "compiled on the project's session: \(ours.joined(separator: "\n"))")

        let url = try TestDatabase.url
        let withJIT = try await PostgresConnection.connect(url + (url.contains("?") ? "&" : "?") + "options=-c%20jit%3Don")
        let available = try await withJIT.query("SELECT pg_jit_available()::text AS jit").first?.string("jit") == "true"
        let theirs = try await plan(withJIT)
        await withJIT.close()
        if available {
            #expect(theirs.contains { $0.contains("JIT") }, "with JIT on, the same read is compiled: \(theirs.joined(separator: "\n"))")
        }
        await pool.close()
    }
}

/// Extreme `requested_at_ms` values (a producer's `created_at_ms`): a row keyed by day 9999-12-31
/// instead of a failed batch. The day overflowed `integer` (22003) and failed every row of the batch
/// and every request of a look-up batch (HostileInputTests.extremeNumbersInRequestsEndCleanly).
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(2)))
struct SendLogV2ExtremeDayTests {
    @Test func anExtremeRequestedAtIsKeyedByTheLastDayAndFailsNoBatch() async throws {
        let (_, pool) = try await SendLogWriterTests.store()
        let request = "v2-extreme-\(UUID())"
        let writer = SendLogWriter(pool: pool, flushInterval: .seconds(3600), maxBatch: 2)
        let results = try await whileRunning(writer) {
            try await withThrowingTaskGroup(of: (String, [UInt8]).self) { group in
                group.addTask { ("max", try await writer.record(SendLogV2Tests.report(request, "max", requestedAtMs: .max), event: [1])) }
                group.addTask { ("now", try await writer.record(SendLogV2Tests.report(request, "now", requestedAtMs: 1_796_428_800_000), event: [2])) }
                return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
        }
        #expect(results == ["max": [1], "now": [2]])
        let day = try await pool.query(
            "SELECT request_day::text AS day FROM send_log_v2 WHERE request_id = $1 AND device_token = 'max'", [.string(request)])
        #expect(try day.first?.string("day") == "9999-12-31")
        let reads = [PendingRetryStore.ProgressRead(requestID: request, requestedAtMs: .max)]
        #expect(try await PendingRetryStore(pool: pool).progress(reads, limit: 10)[request]?.recorded.keys.sorted() == ["max"])
        await pool.close()
    }
}
