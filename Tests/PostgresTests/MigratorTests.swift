import Foundation
import Postgres
import PushTestSupport
import Testing

@Suite(.testDatabase, .serialized, .timeLimit(.minutes(1)))
struct MigratorTests {
    static let migrations = [
        Migration(version: 1, name: "create_widgets", sql: """
            CREATE TABLE widgets (id bigserial PRIMARY KEY, name text NOT NULL UNIQUE);
            CREATE TABLE applications (version int NOT NULL, applied_by int NOT NULL DEFAULT pg_backend_pid());
            INSERT INTO applications (version) VALUES (1);
            """),
        Migration(version: 2, name: "add_widget_color", sql: """
            ALTER TABLE widgets ADD COLUMN color text;
            INSERT INTO applications (version) VALUES (2);
            """),
        // Slow enough that concurrent runs overlap while one holds the lock.
        Migration(version: 3, name: "seed_widgets", sql: """
            SELECT pg_sleep(0.2);
            INSERT INTO widgets (name, color) VALUES ('first', 'red');
            INSERT INTO applications (version) VALUES (3);
            """),
    ]

    @Test func concurrentMigratorsApplyEachMigrationExactlyOnce() async throws {
        let url = try TestDatabase.url
        let reports = try await withThrowingTaskGroup(of: PostgresMigrator.Report.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    let connection = try await PostgresConnection.connect(url)
                    do {
                        let report = try await PostgresMigrator(migrations: Self.migrations.shuffled()).migrate(on: connection)
                        await connection.close()
                        return report
                    } catch {
                        await connection.close()
                        throw error
                    }
                }
            }
            return try await group.reduce(into: [PostgresMigrator.Report]()) { $0.append($1) }
        }
        #expect(reports.count == 8)
        #expect(reports.flatMap(\.applied).sorted() == [1, 2, 3])
        #expect(reports.filter { !$0.applied.isEmpty }.count == 1)
        for report in reports where report.applied.isEmpty { #expect(report.alreadyApplied == [1, 2, 3]) }

        try await TestDatabase.withConnection { connection in
            let recorded = try await connection.query("SELECT version, name, checksum, applied_at FROM schema_migrations ORDER BY version")
            #expect(try recorded.map { try $0.int("version") } == [1, 2, 3])
            #expect(try recorded.map { try $0.string("name") } == ["create_widgets", "add_widget_color", "seed_widgets"])
            #expect(try recorded.allSatisfy { try $0.string("checksum")?.count == 64 && $0.milliseconds("applied_at") != nil })
            let applications = try await connection.query("SELECT version FROM applications ORDER BY version")
            #expect(try applications.map { try $0.int("version") } == [1, 2, 3])
            #expect(try await connection.query("SELECT count(*) AS n FROM widgets").first?.int("n") == 1)
            // The lock was released by every run. pg_locks lists the whole server's locks, and suites
            // running beside this one (each in a database of its own) take advisory locks too: count
            // this database's only.
            let locks = try await connection.query("""
                SELECT count(*) AS n FROM pg_locks
                 WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                """)
            #expect(try locks.first?.int("n") == 0)
        }

        // A later release adds a migration: only that one runs.
        let next = Self.migrations + [Migration(version: 4, name: "index_color", sql: "CREATE INDEX widgets_color ON widgets (color)")]
        let pool = PostgresPool(configuration: .init(conninfo: url, maximumConnections: 1))
        let report = try await PostgresMigrator(migrations: next).migrate(using: pool)
        #expect(report.applied == [4])
        #expect(report.alreadyApplied == [1, 2, 3])
        await pool.close()
    }

    @Test func changedChecksumIsRefusedNamingTheVersion() async throws {
        try await TestDatabase.withConnection { connection in
            try await PostgresMigrator(migrations: Self.migrations).migrate(on: connection)
            var edited = Self.migrations
            edited[1] = Migration(version: 2, name: "add_widget_color", sql: "ALTER TABLE widgets ADD COLUMN colour text;")
            edited.append(Migration(version: 5, name: "never_applied", sql: "CREATE TABLE never_applied (x int)"))
            let error = await #expect(throws: PostgresError.self) {
                try await PostgresMigrator(migrations: edited).migrate(on: connection)
            }
            #expect(error?.code == .migrationChecksumMismatch)
            #expect(error?.message.contains("migration 2 (add_widget_color)") == true)
            // Nothing was applied after the refusal, and the lock is free again.
            let tables = try await connection.query("SELECT to_regclass('never_applied') IS NULL AS missing")
            #expect(try tables.first?.bool("missing") == true)
            #expect(try await connection.query("SELECT pg_try_advisory_lock($1) AS got", [.int64(PostgresMigrator.defaultLockKey)]).first?.bool("got") == true)
            _ = try await connection.query("SELECT pg_advisory_unlock($1)", [.int64(PostgresMigrator.defaultLockKey)])
        }
    }

    @Test func failingMigrationIsRolledBackAndNotRecorded() async throws {
        try await TestDatabase.withConnection { connection in
            try await PostgresMigrator(migrations: Self.migrations).migrate(on: connection)
            let broken = Self.migrations + [Migration(version: 6, name: "half_done", sql: """
                CREATE TABLE half_done (x int);
                INSERT INTO no_such_table VALUES (1);
                """)]
            let error = await #expect(throws: PostgresError.self) {
                try await PostgresMigrator(migrations: broken).migrate(on: connection)
            }
            #expect(error?.code == .undefinedTable)
            #expect(error?.message.hasPrefix("migration 6 (half_done) failed") == true)
            #expect(!connection.isInTransaction)
            let rows = try await connection.query("SELECT to_regclass('half_done') IS NULL AS missing, (SELECT count(*) FROM schema_migrations WHERE version = 6) AS n")
            #expect(try rows.first?.bool("missing") == true)
            #expect(try rows.first?.int("n") == 0)
        }
    }

    @Test func duplicateVersionsAreRejected() async throws {
        try await TestDatabase.withConnection { connection in
            let error = await #expect(throws: PostgresError.self) {
                try await PostgresMigrator(migrations: [
                    Migration(version: 1, name: "a", sql: "SELECT 1"), Migration(version: 1, name: "b", sql: "SELECT 2"),
                ]).migrate(on: connection)
            }
            #expect(error?.code == .invalidMigrations)
        }
    }
}
