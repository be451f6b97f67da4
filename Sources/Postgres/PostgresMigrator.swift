import ServiceCore

/// Applies versioned migrations at start-up, safely when several replicas start at once.
///
/// Every run takes the session advisory lock `pg_advisory_lock(lockKey)` (PostgreSQL 15 docs, §9.27.10
/// "Advisory Lock Functions"), so concurrent runs apply each migration exactly once, one after the
/// other. Under the lock it creates `schema_migrations (version bigint PRIMARY KEY, name text,
/// checksum text, applied_at timestamptz)` when missing, verifies the checksum (hex SHA-256 of the
/// UTF-8 SQL, computed by the server's `sha256()`) of every applied migration, then applies the missing
/// ones in ascending version order, each in its own transaction together with its
/// `schema_migrations` row. Versions recorded in the table but absent from the list (a newer replica
/// ran first) are logged and left alone.
public struct PostgresMigrator: Sendable {
    /// The advisory lock key used by default: the ASCII bytes of "pushmigr" as a big-endian Int64.
    public static let defaultLockKey: Int64 = 0x7075_7368_6D69_6772

    /// What a run did.
    public struct Report: Sendable, Hashable {
        /// Versions this run applied, in order.
        public let applied: [Int]
        /// Versions that were already applied (with matching checksums) when this run took the lock.
        public let alreadyApplied: [Int]
    }

    /// The migrations, in ascending version order.
    public let migrations: [Migration]
    /// The advisory lock key.
    public let lockKey: Int64
    private let logger: Logger

    /// Creates a migrator over `migrations` (any order).
    public init(migrations: [Migration], lockKey: Int64 = PostgresMigrator.defaultLockKey, logger: Logger = Logger(label: "postgres.migrator")) {
        self.migrations = migrations.sorted { $0.version < $1.version }
        self.lockKey = lockKey
        self.logger = logger
    }

    /// Runs the migrations on a pooled connection.
    /// - Throws: as `migrate(on:)`, and the pool's checkout errors.
    @discardableResult
    public func migrate(using pool: PostgresPool) async throws -> Report {
        try await pool.withConnection { try await migrate(on: $0) }
    }

    /// Runs the migrations on `connection`, which must not be inside a transaction.
    /// - Returns: which versions were applied now and which were already there.
    /// - Throws: `PostgresError` `.invalidMigrations` (duplicate or non-positive versions),
    ///   `.migrationChecksumMismatch` naming the version whose SQL changed after it was applied (nothing
    ///   is applied then), or the server's error of a failing migration, its message prefixed with
    ///   `migration <version> (<name>)` (that migration is rolled back; earlier ones stay).
    @discardableResult
    public func migrate(on connection: PostgresConnection) async throws -> Report {
        try validate()
        _ = try await connection.query("SELECT pg_advisory_lock($1)", [.int64(lockKey)])
        do {
            let report = try await migrateLocked(on: connection)
            _ = try await connection.queryUncancellable("SELECT pg_advisory_unlock($1)", [.int64(lockKey)])
            return report
        } catch {
            if connection.isConnected {
                _ = try? await connection.queryUncancellable("SELECT pg_advisory_unlock($1)", [.int64(lockKey)])
            }
            throw error
        }
    }

    private func validate() throws {
        var seen = Set<Int>()
        for migration in migrations {
            guard migration.version > 0 else {
                throw PostgresError(code: .invalidMigrations, message: "migration \(migration.version) (\(migration.name)): versions must be positive")
            }
            guard seen.insert(migration.version).inserted else {
                throw PostgresError(code: .invalidMigrations, message: "migration version \(migration.version) appears more than once")
            }
        }
    }

    private func migrateLocked(on connection: PostgresConnection) async throws -> Report {
        let existing = try await connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")
        if try existing.first?.bool("present") != true {
            try await connection.execute("""
            CREATE TABLE schema_migrations (
                version bigint PRIMARY KEY,
                name text NOT NULL,
                checksum text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """)
        }
        var applied: [Int: (name: String, checksum: String)] = [:]
        for row in try await connection.query("SELECT version, name, checksum FROM schema_migrations") {
            guard let version = try row.int("version"), let name = try row.string("name"), let checksum = try row.string("checksum") else { continue }
            applied[version] = (name, checksum)
        }

        var checksums: [Int: String] = [:]
        for migration in migrations {
            let rows = try await connection.query("SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex') AS checksum", [.string(migration.sql)])
            checksums[migration.version] = try rows.first?.string("checksum") ?? ""
        }

        var alreadyApplied: [Int] = []
        for migration in migrations {
            guard let record = applied[migration.version] else { continue }
            let expected = checksums[migration.version] ?? ""
            guard record.checksum == expected else {
                throw PostgresError(
                    code: .migrationChecksumMismatch,
                    message: "migration \(migration.version) (\(migration.name)) was changed after it was applied: "
                        + "schema_migrations has checksum \(record.checksum), the code has \(expected); "
                        + "add a new migration instead of editing an applied one")
            }
            alreadyApplied.append(migration.version)
        }
        let known = Set(migrations.map(\.version))
        for version in applied.keys.sorted() where !known.contains(version) {
            logger.warning("schema_migrations has a version this code does not know (applied by a newer release?)", ["version": String(version)])
        }

        var appliedNow: [Int] = []
        for migration in migrations where applied[migration.version] == nil {
            let checksum = checksums[migration.version] ?? ""
            do {
                try await connection.withTransaction { connection in
                    try await connection.executeScript(migration.sql)
                    try await connection.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        [.int(migration.version), .string(migration.name), .string(checksum)])
                }
            } catch var error as PostgresError {
                error.message = "migration \(migration.version) (\(migration.name)) failed: \(error.message)"
                throw error
            }
            logger.info("applied migration", ["version": String(migration.version), "name": migration.name])
            appliedNow.append(migration.version)
        }
        return Report(applied: appliedNow, alreadyApplied: alreadyApplied)
    }
}
