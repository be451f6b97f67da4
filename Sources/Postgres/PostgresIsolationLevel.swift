/// A transaction isolation level (PostgreSQL 15 docs, §13.2 "Transaction Isolation").
public struct PostgresIsolationLevel: Sendable, Hashable, CustomStringConvertible {
    let sql: String

    /// `READ COMMITTED`, the server default.
    public static let readCommitted = PostgresIsolationLevel(sql: "READ COMMITTED")
    /// `REPEATABLE READ`: may fail with 40001 `serializationFailure` on concurrent updates.
    public static let repeatableRead = PostgresIsolationLevel(sql: "REPEATABLE READ")
    /// `SERIALIZABLE`: may fail with 40001 `serializationFailure`; retry the whole transaction.
    public static let serializable = PostgresIsolationLevel(sql: "SERIALIZABLE")

    public var description: String { sql }
}
