/// A NOTICE, WARNING, INFO, LOG or DEBUG message the server sent during a statement
/// (PostgreSQL 15 docs, §34.13 "Notice Processing"; `RAISE NOTICE` in PL/pgSQL).
public struct PostgresNotice: Sendable, Hashable {
    /// `NOTICE`, `WARNING`, `INFO`, `LOG`, `DEBUG` (not localized), or `FATAL` for the message a
    /// terminated backend sends before it closes the connection.
    public let severity: String
    /// The five-character SQLSTATE, such as `00000` or `01000`.
    public let sqlState: String?
    /// The primary message.
    public let message: String
    /// The DETAIL field, if any.
    public let detail: String?
    /// The HINT field, if any.
    public let hint: String?
}
