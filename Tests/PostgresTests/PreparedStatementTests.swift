import Foundation
import Postgres
import PushTestSupport
import Testing

@Suite(.testDatabase, .timeLimit(.minutes(1)))
struct PreparedStatementTests {
    @Test func preparedStatementsAreReusedPerSessionAndSurviveDiscard() async throws {
        try await TestDatabase.withConnection { connection in
            try await connection.execute("CREATE TABLE kv (k text PRIMARY KEY, v bytea)")
            for index in 0..<20 {
                try await connection.execute(
                    "INSERT INTO kv VALUES ($1, $2)", [.string("key\(index)"), .bytes([UInt8(index), 0, 255])], prepared: true)
            }
            for index in 0..<20 {
                let rows = try await connection.query("SELECT v FROM kv WHERE k = $1", [.string("key\(index)")], prepared: true)
                #expect(try rows.first?.bytes("v") == [UInt8(index), 0, 255])
            }
            // One server-side statement per SQL text and parameter types, not one per call.
            let statements = try await connection.query("SELECT count(*) AS n FROM pg_prepared_statements")
            #expect(try statements.first?.int("n") == 2)
            // Text and NULL both declare no type (OID 0): the same statement serves both; a typed
            // parameter in the same SQL makes another one.
            let nullRows = try await connection.query("SELECT v FROM kv WHERE k = $1", [nil], prepared: true)
            #expect(nullRows.isEmpty)
            #expect(try await connection.query("SELECT count(*) AS n FROM pg_prepared_statements").first?.int("n") == 2)
            let typed = try await connection.query("SELECT v FROM kv WHERE k = $1::text", [.int(3)], prepared: true)
            #expect(typed.isEmpty)
            #expect(try await connection.query("SELECT count(*) AS n FROM pg_prepared_statements").first?.int("n") == 3)

            // The session forgets its statements: the next call fails once, then prepares again.
            try await connection.execute("DEALLOCATE ALL")
            _ = try? await connection.query("SELECT v FROM kv WHERE k = $1", [.string("key1")], prepared: true)
            let again = try await connection.query("SELECT v FROM kv WHERE k = $1", [.string("key1")], prepared: true)
            #expect(try again.first?.bytes("v") == [1, 0, 255])

            // A bad statement is not cached and reports its error.
            let error = await #expect(throws: PostgresError.self) {
                try await connection.query("SELECT nope FROM kv WHERE k = $1", ["x"], prepared: true)
            }
            #expect(error?.code == .undefinedColumn)
        }
    }

    /// Prints round-trip rates; asserts only that both paths return the right rows.
    @Test func roundTripRate() async throws {
        try await TestDatabase.withConnection { connection in
            let count = 2_000
            let clock = ContinuousClock()
            for prepared in [false, true] {
                let start = clock.now
                for index in 0..<count {
                    let rows = try await connection.query("SELECT $1::bigint + 1 AS v", [.int(index)], prepared: prepared)
                    guard try rows.first?.int("v") == index + 1 else { throw TestFailure("wrong row") }
                }
                let elapsed = clock.now - start
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                print("postgres round trips (prepared: \(prepared)): \(count) in \(elapsed), \(Int(Double(count) / seconds))/s")
            }
        }
    }
}
