import Foundation
import Postgres
import PushTestSupport
import Testing

/// Swift's cooperative pool has two threads here: if libpq calls ran on it, four concurrent
/// `pg_sleep(1)` would take two seconds and freeze every other task meanwhile.
@Suite(.testDatabase, .timeLimit(.minutes(1)))
struct CooperativePoolTests {
    @Test func blockingStatementsNeverStarveOtherTasks() async throws {
        var connections: [PostgresConnection] = []
        for _ in 0..<4 { connections.append(try await TestDatabase.connect()) }
        let ticks = Shared(0)
        let done = Shared(false)
        let ticker = Task {
            while !done.value {
                try await Task.sleep(for: .milliseconds(10))
                ticks.update { $0 += 1 }
            }
        }
        let clock = ContinuousClock()
        let start = clock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for connection in connections {
                group.addTask { _ = try await connection.query("SELECT pg_sleep(1)") }
            }
            try await group.waitForAll()
        }
        let elapsed = clock.now - start
        let ticksDuringSleep = ticks.value
        done.update { $0 = true }
        try await ticker.value
        for connection in connections { await connection.close() }

        #expect(elapsed >= .milliseconds(990), "pg_sleep(1) returned after \(elapsed)")
        #expect(elapsed < .seconds(3), "four concurrent pg_sleep(1) took \(elapsed)")
        // About 90 ticks of 10 ms fit in a second; a starved pool would manage none.
        #expect(ticksDuringSleep >= 20, "only \(ticksDuringSleep) ticks of the other task ran")
    }
}
