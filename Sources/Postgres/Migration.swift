/// One versioned schema change, applied once per database by `PostgresMigrator`.
///
/// The SQL runs as a script (several `;`-separated statements allowed) inside a transaction of its
/// own, so it must not contain `BEGIN`/`COMMIT` or statements that refuse a transaction block
/// (`CREATE INDEX CONCURRENTLY`, `VACUUM`). Never edit a migration once applied: its SHA-256 checksum
/// is recorded, and a changed one stops every replica at start-up.
public struct Migration: Sendable, Hashable {
    /// The version; positive, unique, applied in ascending order.
    public let version: Int
    /// A short name for logs and `schema_migrations.name`, such as `create_device_tokens`.
    public let name: String
    /// The SQL script.
    public let sql: String

    /// Creates a migration.
    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}
