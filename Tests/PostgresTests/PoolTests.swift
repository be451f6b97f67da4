import Foundation
import Postgres
import Synchronization
import PushTestSupport
import Testing

@Suite(.testDatabase, .timeLimit(.minutes(1)))
struct PoolTests {
    @Test func manyMoreTasksThanConnectionsAllComplete() async throws {
        let url = try TestDatabase.url(applicationName: "many_tasks")
        let pool = PostgresPool(configuration: .init(conninfo: url, minimumConnections: 2, maximumConnections: 4))
        try await pool.start()
        #expect(pool.statistics.open == 2)
        let inside = Shared(0), mostInside = Shared(0)
        let pids = Shared<Set<Int32>>([])
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<50 {
                group.addTask {
                    try await pool.withConnection { connection in
                        let now = inside.update { $0 += 1; return $0 }
                        mostInside.update { $0 = max($0, now) }
                        defer { inside.update { $0 -= 1 } }
                        let pid = connection.backendPID
                        pids.update { _ = $0.insert(pid) }
                        let rows = try await connection.query("SELECT $1::int * 2 AS v, pg_sleep(0.01)", [.int(index)])
                        return try rows.first?.int("v") ?? -1
                    }
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(results.sorted() == (0..<50).map { $0 * 2 })
        #expect(mostInside.value <= 4)
        #expect(mostInside.value >= 2)
        #expect(pids.value.count <= 4)
        let stats = pool.statistics
        #expect(stats.open <= 4 && stats.leased == 0 && stats.waiting == 0 && stats.discarded == 0)
        // The server agrees: no more than 4 sessions of ours on this database.
        try await TestDatabase.withConnection { observer in
            let rows = try await observer.query(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1", ["many_tasks"])
            #expect(try rows.first?.int("n") == stats.open)
        }
        try await pool.healthCheck()
        await pool.close()
        let closed = await #expect(throws: PostgresError.self) { try await pool.query("SELECT 1") }
        #expect(closed?.code == .poolClosed)
    }

    @Test func checkoutTimesOutWhenAllConnectionsAreHeld() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 2, checkoutTimeout: .milliseconds(300)))
        let (release, releaser) = AsyncStream.makeStream(of: Void.self)
        let held = Shared(0)
        let holders = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        try await pool.withConnection { _ in
                            held.update { $0 += 1 }
                            for await _ in release { break }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        while held.value < 2 { try await Task.sleep(for: .milliseconds(10)) }

        let clock = ContinuousClock()
        let start = clock.now
        let timeout = await #expect(throws: PostgresError.self) { try await pool.query("SELECT 1") }
        let waited = clock.now - start
        #expect(timeout?.code == .poolTimeout)
        #expect(waited >= .milliseconds(300) && waited < .seconds(3), "waited \(waited)")
        #expect(pool.statistics.waiting == 0)

        // A waiter gets the connection as soon as a holder returns it.
        async let waiter = pool.query("SELECT 7 AS v")
        try await Task.sleep(for: .milliseconds(50))
        #expect(pool.statistics.waiting == 1)
        releaser.yield()
        #expect(try await waiter.first?.int("v") == 7)
        releaser.finish()
        try await holders.value
        #expect(pool.statistics.open == 2)
        #expect(pool.statistics.created == 2)
        await pool.close()
    }

    /// `Statistics.waits` and `waitTime` (the dispatcher's `push_pg_pool_waits_total` and
    /// `push_pg_pool_wait_seconds_total`): a checkout that found every connection leased is counted
    /// with the time it waited; one that found a connection free is not.
    @Test func checkoutsThatWaitAreCountedWithTheirWait() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 1, checkoutTimeout: .seconds(30)))
        _ = try await pool.query("SELECT 1")
        #expect(pool.statistics.waits == 0 && pool.statistics.waitTime == .zero && pool.statistics.maximum == 1)
        // A statement holds the only connection for 300 ms; another waits for it.
        async let holder = pool.query("SELECT pg_sleep(0.3)")
        while pool.statistics.leased == 0 { try await Task.sleep(for: .milliseconds(5)) }
        let clock = ContinuousClock()
        let start = clock.now
        _ = try await pool.query("SELECT 1")
        let waited = clock.now - start
        _ = try await holder
        let statistics = pool.statistics
        #expect(statistics.waits == 1)
        #expect(statistics.waitTime >= .milliseconds(100) && statistics.waitTime <= waited, "waited \(statistics.waitTime) of \(waited)")
        _ = try await pool.query("SELECT 1")
        #expect(pool.statistics.waits == 1)
        await pool.close()
    }

    @Test func cancelledWaiterLeavesTheQueue() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 1, checkoutTimeout: .seconds(30)))
        let connectionHeld = Shared(false)
        let (release, releaser) = AsyncStream.makeStream(of: Void.self)
        let holder = Task {
            try await pool.withConnection { _ in
                connectionHeld.update { $0 = true }
                for await _ in release { break }
            }
        }
        while !connectionHeld.value { try await Task.sleep(for: .milliseconds(10)) }
        let waiter = Task { try await pool.query("SELECT 1") }
        while pool.statistics.waiting == 0 { try await Task.sleep(for: .milliseconds(10)) }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(pool.statistics.waiting == 0)
        releaser.finish()
        try await holder.value
        #expect(try await pool.query("SELECT 1 AS v").first?.int("v") == 1)
        await pool.close()
    }

    @Test func backendTerminatedWhileIdleIsReplaced() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, minimumConnections: 1, maximumConnections: 1))
        try await pool.start()
        let firstPID = try await pool.withConnection { $0.backendPID }
        try await terminate(firstPID)

        let rows = try await pool.query("SELECT pg_backend_pid() AS pid")
        let secondPID = try #require(try rows.first?.int64("pid"))
        #expect(secondPID != Int64(firstPID))
        #expect(pool.statistics.discarded == 1)
        #expect(pool.statistics.created == 2)
        #expect(pool.statistics.open == 1)
        await pool.close()
    }

    @Test func backendTerminatedDuringUseIsReportedAndReplaced() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 1))
        let lost = await #expect(throws: PostgresError.self) {
            try await pool.withConnection { connection in
                try await terminate(connection.backendPID)
                _ = try await connection.query("SELECT 1")
            }
        }
        #expect(lost?.code == .connectionLost)
        #expect(lost?.isRetryable == true)
        #expect(pool.statistics.discarded == 1)
        #expect(try await pool.query("SELECT 1 AS v").first?.int("v") == 1)
        await pool.close()
    }

    @Test func lostConnectionIsDetectedWithoutAPool() async throws {
        let connection = try await TestDatabase.connect()
        try await terminate(connection.backendPID)
        let lost = await #expect(throws: PostgresError.self) { try await connection.query("SELECT 1") }
        #expect(lost?.code == .connectionLost)
        #expect(lost?.isRetryable == true)
        #expect(!connection.isConnected)
        // Later statements fail at once instead of hanging.
        let again = await #expect(throws: PostgresError.self) { try await connection.query("SELECT 1") }
        #expect(again?.code == .connectionLost)
        await connection.close()
    }

    @Test func poolStartFailsClearlyWhenTheServerIsUnreachable() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: "postgresql://postgres@127.0.0.1:\(try freePort())/push", maximumConnections: 2))
        let error = await #expect(throws: PostgresError.self) { try await pool.start() }
        #expect(error?.code == .connectionFailed)
        #expect(pool.statistics.open == 0)
        await pool.close()
    }

    /// Ends the backend `pid` from another session and waits until it is gone.
    func terminate(_ pid: Int32) async throws {
        try await TestDatabase.withConnection { admin in
            let rows = try await admin.query("SELECT pg_terminate_backend($1, 5000) AS ok", [.int32(pid)])
            #expect(try rows.first?.bool("ok") == true)
        }
    }
}

@Suite struct PoolStateMachineTests {
    @Test func waitersAreServedInOrderAndBrokenConnectionsFreeTheirSlot() {
        var machine = PoolStateMachineProbe(maximum: 2)
        #expect(machine.checkout() == "connect")
        machine.connected()
        #expect(machine.checkout() == "connect")
        machine.connected()
        #expect(machine.checkout() == "wait 1")
        #expect(machine.checkout() == "wait 2")
        // A healthy connection goes to the first waiter; a broken one gives the next waiter a permit.
        #expect(machine.release("a", reusable: true) == "deliver 1 connection a")
        #expect(machine.release("b", reusable: false) == "close b, deliver 2 permit")
        #expect(machine.abandon(2) == false)
        #expect(machine.checkout() == "wait 3")
        #expect(machine.abandon(3) == true)
        #expect(machine.release("a", reusable: true) == "")
        #expect(machine.checkout() == "use a")
        // Every checkout that had to queue is counted, however its wait ended.
        #expect(machine.waits == 3)
    }
}
