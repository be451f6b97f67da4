/// The one error type of the `Postgres` module: a server error with its SQLSTATE, or a client-side
/// failure (connecting, a lost connection, a column read as the wrong type, the pool, migrations).
///
/// Server errors carry the fields of PostgreSQL's ErrorResponse message (PostgreSQL 15 docs,
/// §55.8 "Error and Notice Message Fields"). `description` never contains parameter values or
/// passwords.
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    /// What went wrong: a SQLSTATE for server errors (PostgreSQL 15 docs, Appendix A), or one of the
    /// client-side codes. Compare with the named statics: `error.code == .uniqueViolation`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Kind: Hashable, Sendable {
            case sqlState(String)
            case connectionFailed, connectionLost, connectionClosed
            case columnNotFound, typeMismatch, unsupportedResult
            case poolTimeout, poolClosed
            case migrationChecksumMismatch, invalidMigrations
        }
        private let kind: Kind
        private init(_ kind: Kind) { self.kind = kind }

        /// The code of a server error with the five-character `sqlState`, such as `"23505"`.
        public init(sqlState: String) { self.kind = .sqlState(sqlState) }

        /// The five-character SQLSTATE of a server error; `nil` for client-side codes.
        public var sqlState: String? {
            if case .sqlState(let state) = kind { return state }
            return nil
        }

        public var description: String {
            switch kind {
            case .sqlState(let state): state
            case .connectionFailed: "connectionFailed"
            case .connectionLost: "connectionLost"
            case .connectionClosed: "connectionClosed"
            case .columnNotFound: "columnNotFound"
            case .typeMismatch: "typeMismatch"
            case .unsupportedResult: "unsupportedResult"
            case .poolTimeout: "poolTimeout"
            case .poolClosed: "poolClosed"
            case .migrationChecksumMismatch: "migrationChecksumMismatch"
            case .invalidMigrations: "invalidMigrations"
            }
        }

        // Client-side codes.
        /// The connection could not be established (refused, bad URL, authentication, timeout).
        public static let connectionFailed = Code(.connectionFailed)
        /// The server closed the connection or the network dropped it; the connection is unusable.
        public static let connectionLost = Code(.connectionLost)
        /// The connection was closed by this process (`close()`), or the pool was shut down.
        public static let connectionClosed = Code(.connectionClosed)
        /// A row accessor named a column the result does not have.
        public static let columnNotFound = Code(.columnNotFound)
        /// A row accessor asked for a Swift type the column's PostgreSQL type cannot give.
        public static let typeMismatch = Code(.typeMismatch)
        /// The statement produced a result this client does not handle (COPY).
        public static let unsupportedResult = Code(.unsupportedResult)
        /// No pool connection became free within the checkout timeout.
        public static let poolTimeout = Code(.poolTimeout)
        /// The pool was shut down.
        public static let poolClosed = Code(.poolClosed)
        /// An applied migration's SQL differs from the one the code carries now.
        public static let migrationChecksumMismatch = Code(.migrationChecksumMismatch)
        /// The migration list is malformed (duplicate or non-positive versions).
        public static let invalidMigrations = Code(.invalidMigrations)

        // SQLSTATEs (PostgreSQL 15 docs, Appendix A "PostgreSQL Error Codes").
        /// 23505 `unique_violation`.
        public static let uniqueViolation = Code(sqlState: "23505")
        /// 23503 `foreign_key_violation`.
        public static let foreignKeyViolation = Code(sqlState: "23503")
        /// 23502 `not_null_violation`.
        public static let notNullViolation = Code(sqlState: "23502")
        /// 23514 `check_violation`.
        public static let checkViolation = Code(sqlState: "23514")
        /// 40001 `serialization_failure`: retry the whole transaction.
        public static let serializationFailure = Code(sqlState: "40001")
        /// 40P01 `deadlock_detected`: retry the whole transaction.
        public static let deadlockDetected = Code(sqlState: "40P01")
        /// 42601 `syntax_error`.
        public static let syntaxError = Code(sqlState: "42601")
        /// 42P01 `undefined_table`.
        public static let undefinedTable = Code(sqlState: "42P01")
        /// 42703 `undefined_column`.
        public static let undefinedColumn = Code(sqlState: "42703")
        /// 22P02 `invalid_text_representation` (a parameter that does not parse as the column's type).
        public static let invalidTextRepresentation = Code(sqlState: "22P02")
        /// 25P02 `in_failed_sql_transaction`: a statement failed earlier in this transaction.
        public static let inFailedTransaction = Code(sqlState: "25P02")
        /// 0A000 `feature_not_supported` (also "cached plan must not change result type").
        public static let featureNotSupported = Code(sqlState: "0A000")
        /// 57014 `query_canceled` (statement timeout or a cancelled task).
        public static let queryCanceled = Code(sqlState: "57014")
        /// 57P01 `admin_shutdown` (server shutting down, or `pg_terminate_backend`).
        public static let adminShutdown = Code(sqlState: "57P01")
        /// 55P03 `lock_not_available` (`NOWAIT`, `lock_timeout`).
        public static let lockNotAvailable = Code(sqlState: "55P03")
    }

    /// What went wrong.
    public var code: Code
    /// The five-character SQLSTATE the server sent, when it sent one (also for `connectionLost`,
    /// where it may be `57P01`).
    public var sqlState: String?
    /// The primary human-readable message.
    public var message: String
    /// The server's DETAIL field, such as `Key (token)=(ab12) already exists.`
    public var detail: String?
    /// The server's HINT field.
    public var hint: String?
    /// The name of the violated constraint, for integrity errors.
    public var constraint: String?
    /// The server's severity (`ERROR`, `FATAL`, `PANIC`), when it sent one.
    public var severity: String?
    /// The underlying error, if any.
    public var cause: (any Error & Sendable)?

    /// Creates an error.
    public init(
        code: Code, message: String, sqlState: String? = nil, detail: String? = nil, hint: String? = nil,
        constraint: String? = nil, severity: String? = nil, cause: (any Error & Sendable)? = nil
    ) {
        self.code = code
        self.sqlState = sqlState ?? code.sqlState
        self.message = message
        self.detail = detail
        self.hint = hint
        self.constraint = constraint
        self.severity = severity
        self.cause = cause
    }

    /// Whether running the same work again (on a new connection, or as a new transaction) may succeed:
    /// a lost connection (including SQLSTATE class 08 and 57P01–57P03), a serialization failure
    /// (40001) or a deadlock (40P01).
    public var isRetryable: Bool {
        if code == .connectionLost { return true }
        guard let state = sqlState else { return false }
        return state == "40001" || state == "40P01" || state.hasPrefix("08")
            || state == "57P01" || state == "57P02" || state == "57P03"
    }

    public var description: String {
        var text = "PostgresError(\(code)"
        if let sqlState, code.sqlState == nil { text += ", SQLSTATE \(sqlState)" }
        text += "): \(message)"
        if let detail { text += " DETAIL: \(detail)" }
        if let hint { text += " HINT: \(hint)" }
        if let cause { text += " (cause: \(cause))" }
        return text
    }
}
