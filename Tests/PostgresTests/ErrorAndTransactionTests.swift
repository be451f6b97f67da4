import Foundation
import Postgres
import PushTestSupport
import Testing

@Suite(.testDatabase, .timeLimit(.minutes(1)))
struct ErrorTests {
    @Test func syntaxErrorCarriesItsSQLStateAndTheConnectionStaysUsable() async throws {
        try await TestDatabase.withConnection { connection throws in
            let error = await #expect(throws: PostgresError.self) { try await connection.query("SELEKT 1") }
            #expect(error?.code == .syntaxError)
            #expect(error?.sqlState == "42601")
            #expect(error?.message.contains("syntax error") == true)
            #expect(error?.severity == "ERROR")
            #expect(error?.isRetryable == false)
            #expect(connection.isConnected)
            #expect(try await connection.query("SELECT 41 + 1 AS v").first?.int("v") == 42)
        }
    }

    @Test func uniqueViolationNamesTheConstraintAndKey() async throws {
        try await TestDatabase.withConnection { connection in
            try await connection.execute("CREATE TABLE tokens (token text CONSTRAINT tokens_token_key UNIQUE)")
            try await connection.execute("INSERT INTO tokens VALUES ($1)", ["ab12"])
            let error = await #expect(throws: PostgresError.self) {
                try await connection.execute("INSERT INTO tokens VALUES ($1)", ["ab12"])
            }
            #expect(error?.code == .uniqueViolation)
            #expect(error?.sqlState == "23505")
            #expect(error?.constraint == "tokens_token_key")
            #expect(error?.detail == "Key (token)=(ab12) already exists.")
            #expect(error?.message.contains("duplicate key") == true)
            #expect(try await connection.execute("INSERT INTO tokens VALUES ($1)", ["cd34"]) == 1)
        }
    }

    @Test func badParameterAndUnknownTableErrors() async throws {
        try await TestDatabase.withConnection { connection throws in
            let parse = await #expect(throws: PostgresError.self) { try await connection.query("SELECT $1::int AS v", ["12x"]) }
            #expect(parse?.code == .invalidTextRepresentation)
            let table = await #expect(throws: PostgresError.self) { try await connection.query("SELECT * FROM nowhere") }
            #expect(table?.code == .undefinedTable)
            #expect(table?.message.contains("nowhere") == true)
            #expect(try await connection.query("SELECT $1::int AS v", ["12"]).first?.int("v") == 12)
        }
    }

    @Test func serializationFailureIsRetryable() async throws {
        let first = try await TestDatabase.connect()
        let second = try await TestDatabase.connect()
        try await first.execute("CREATE TABLE doctors (name text, on_call bool)")
        try await first.execute("INSERT INTO doctors VALUES ('alice', true), ('bob', true)")
        // Write skew: each transaction sees two doctors on call and takes one off.
        try await first.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        try await second.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        _ = try await first.query("SELECT count(*) FROM doctors WHERE on_call")
        _ = try await second.query("SELECT count(*) FROM doctors WHERE on_call")
        try await first.execute("UPDATE doctors SET on_call = false WHERE name = $1", ["alice"])
        let failure: PostgresError? = await {
            do {
                try await second.execute("UPDATE doctors SET on_call = false WHERE name = $1", ["bob"])
                try await first.execute("COMMIT")
                try await second.execute("COMMIT")
                return nil
            } catch let error as PostgresError {
                return error
            } catch {
                return nil
            }
        }()
        #expect(failure?.code == .serializationFailure)
        #expect(failure?.isRetryable == true)
        _ = try? await first.execute("ROLLBACK")
        _ = try? await second.execute("ROLLBACK")
        await first.close()
        await second.close()
    }

    @Test func deadlockIsDetectedAndRetryable() async throws {
        let first = try await TestDatabase.connect()
        let second = try await TestDatabase.connect()
        try await first.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int)")
        try await first.execute("INSERT INTO accounts VALUES (1, 0), (2, 0)")
        try await first.execute("BEGIN")
        try await second.execute("BEGIN")
        try await first.execute("UPDATE accounts SET balance = 1 WHERE id = 1")
        try await second.execute("UPDATE accounts SET balance = 1 WHERE id = 2")
        // Both block on each other's row; the server's deadlock detector (deadlock_timeout, 1 s) ends one.
        async let a: PostgresError? = Self.error { try await first.execute("UPDATE accounts SET balance = 2 WHERE id = 2") }
        async let b: PostgresError? = Self.error { try await second.execute("UPDATE accounts SET balance = 2 WHERE id = 1") }
        let errors = await [a, b].compactMap { $0 }
        #expect(errors.count == 1)
        #expect(errors.first?.code == .deadlockDetected)
        #expect(errors.first?.isRetryable == true)
        _ = try? await first.execute("ROLLBACK")
        _ = try? await second.execute("ROLLBACK")
        await first.close()
        await second.close()
    }

    @Test func cancellingTheTaskCancelsTheStatement() async throws {
        try await TestDatabase.withConnection { connection in
            let clock = ContinuousClock()
            let start = clock.now
            let task = Task { try await connection.query("SELECT pg_sleep(30)") }
            try await Task.sleep(for: .milliseconds(300))
            task.cancel()
            let error = await #expect(throws: PostgresError.self) { try await task.value }
            #expect(error?.code == .queryCanceled)
            #expect(clock.now - start < .seconds(5))
            #expect(try await connection.query("SELECT 1 AS v").first?.int("v") == 1)
        }
    }

    static func error(_ body: () async throws -> Void) async -> PostgresError? {
        do {
            try await body()
            return nil
        } catch let error as PostgresError {
            return error
        } catch {
            return PostgresError(code: .connectionLost, message: "unexpected \(error)")
        }
    }
}

@Suite(.testDatabase, .serialized, .timeLimit(.minutes(1)))
struct TransactionTests {
    struct Abort: Error {}

    @Test func committedWorkIsVisibleAndThrownWorkIsRolledBack() async throws {
        let observer = try await TestDatabase.connect()
        let connection = try await TestDatabase.connect()
        try await connection.execute("CREATE TABLE ledger (id int PRIMARY KEY, note text)")

        let value = try await connection.withTransaction { connection in
            try await connection.execute("INSERT INTO ledger VALUES (1, $1)", ["kept"])
            // Not visible to others before COMMIT.
            #expect(try await observer.query("SELECT count(*) AS n FROM ledger").first?.int("n") == 0)
            #expect(connection.isInTransaction)
            return 7
        }
        #expect(value == 7)
        #expect(!connection.isInTransaction)
        #expect(try await observer.query("SELECT note FROM ledger WHERE id = 1").first?.string("note") == "kept")

        await #expect(throws: Abort.self) {
            try await connection.withTransaction { connection in
                try await connection.execute("INSERT INTO ledger VALUES (2, $1)", ["dropped"])
                throw Abort()
            }
        }
        #expect(!connection.isInTransaction)
        #expect(try await observer.query("SELECT count(*) AS n FROM ledger").first?.int("n") == 1)

        // A failed statement whose error the body swallowed cannot commit.
        let swallowed = await #expect(throws: PostgresError.self) {
            try await connection.withTransaction(isolationLevel: .repeatableRead) { connection in
                try await connection.execute("INSERT INTO ledger VALUES (3, $1)", ["lost"])
                _ = try? await connection.execute("INSERT INTO ledger VALUES (1, $1)", ["duplicate"])
            }
        }
        #expect(swallowed?.code == .inFailedTransaction)
        #expect(try await observer.query("SELECT count(*) AS n FROM ledger").first?.int("n") == 1)
        #expect(try await connection.query("SHOW transaction_isolation").first?.string("transaction_isolation") == "read committed")

        try await connection.withTransaction(isolationLevel: .serializable) { connection throws in
            #expect(try await connection.query("SHOW transaction_isolation").first?.string("transaction_isolation") == "serializable")
        }
        await observer.close()
        await connection.close()
    }

    @Test func concurrentTransactionsThroughThePool() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 4))
        try await pool.start()
        try await pool.execute("CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)")
        try await pool.execute("INSERT INTO counter VALUES (1, 0)")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<40 {
                group.addTask {
                    do {
                        try await pool.withTransaction { connection in
                            try await connection.execute("UPDATE counter SET n = n + 1 WHERE id = 1")
                            try await connection.execute("INSERT INTO counter VALUES ($1, $2)", [.int(100 + index), .int(index)])
                            if index % 4 == 0 { throw Abort() }  // every fourth rolls back
                        }
                    } catch is Abort {}
                }
            }
            try await group.waitForAll()
        }
        let rows = try await pool.query("SELECT n FROM counter WHERE id = 1")
        #expect(try rows.first?.int("n") == 30)
        #expect(try await pool.query("SELECT count(*) AS n FROM counter WHERE id >= 100").first?.int("n") == 30)
        #expect(pool.statistics.open <= 4)
        await pool.close()
    }
}
