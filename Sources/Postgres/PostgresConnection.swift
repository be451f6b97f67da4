import Foundation
import ServiceCore
import Synchronization

/// One connection to a PostgreSQL server, through libpq.
///
/// Each connection owns a `DedicatedThread`: every libpq call (connecting, `PQexecParams`) blocks that
/// thread, never one of the cooperative pool's threads. Statements submitted by several tasks run one
/// after another in submission order, but a connection carries one session's state (transactions),
/// so use it from one task at a time: take it from a `PostgresPool` for concurrent work.
///
/// Cancelling the task that awaits a statement sends a cancel request (`PQcancel`); the statement
/// then fails with `PostgresError.Code.queryCanceled`.
public final class PostgresConnection: Sendable {
    private let handle: PQConnection
    private let thread: DedicatedThread
    private let state: Mutex<State>
    /// The logger for this connection's notices and lost-connection reports.
    public let logger: Logger
    /// The process id of the server backend serving this connection (`pg_backend_pid()`), as used by
    /// `pg_stat_activity.pid` and `pg_terminate_backend`.
    public let backendPID: Int32

    private struct State {
        var isConnected = true
        var isInTransaction = false
        var isClosed = false
    }

    private init(handle: PQConnection, thread: DedicatedThread, logger: Logger) {
        self.handle = handle
        self.thread = thread
        self.backendPID = handle.backendPID
        self.logger = logger.with(["pg.pid": String(handle.backendPID)])
        self.state = Mutex(State())
    }

    deinit {
        let handle = self.handle
        thread.submit { handle.finish() }
        thread.shutdown()
    }

    /// Opens a connection.
    /// - Parameters:
    ///   - conninfo: a URL (`postgresql://user@127.0.0.1:54329/push?connect_timeout=5`) or a keyword
    ///     string (`host=127.0.0.1 port=54329 dbname=push user=postgres`), as libpq accepts (PostgreSQL 15
    ///     docs, §34.1.1). `connect_timeout` defaults to 10 s. The session runs with `TimeZone=UTC`,
    ///     `DateStyle=ISO`, `bytea_output=hex` and `jit=off` (the `options` keyword can add more, and
    ///     overrides these).
    ///   - password: the password (libpq's `password` keyword), overriding one in `conninfo`; for a
    ///     password kept in a file rather than in the connection string. Default: none.
    ///   - logger: receives server notices (instead of libpq's default, stderr) and connection events.
    ///   - onNotice: also called with every notice, on the connection's thread; keep it short.
    /// - Throws: `PostgresError` `.connectionFailed`, whose message names the host, port, database and
    ///   user and gives libpq's reason (refused, authentication failed, timeout, bad URL); never the password.
    public static func connect(
        _ conninfo: String, password: String? = nil, logger: Logger = Logger(label: "postgres"),
        onNotice: (@Sendable (PostgresNotice) -> Void)? = nil
    ) async throws -> PostgresConnection {
        let thread = DedicatedThread(name: "pg-conn-\(connectionCounter.add(1, ordering: .relaxed).newValue)")
        let sink = NoticeSink(logger: logger, handler: onNotice)
        let result = try await thread.run {
            PQConnection.connect(conninfo: conninfo, password: password, applicationName: "push", notices: sink)
        }
        switch result {
        case .success(let handle):
            return PostgresConnection(handle: handle, thread: thread, logger: logger)
        case .failure(let error):
            thread.shutdown()
            throw error
        }
    }

    /// Whether the connection is usable as far as this process knows: `false` after the server
    /// closed it (seen by the last statement or `checkAlive()`) or after `close()`.
    public var isConnected: Bool { state.withLock { $0.isConnected && !$0.isClosed } }

    /// Whether a transaction block is open on this connection (after the last statement).
    public var isInTransaction: Bool { state.withLock { $0.isInTransaction } }

    /// Runs one SQL statement with `$1`, `$2`… placeholders and returns its rows.
    ///
    /// Parameters travel apart from the SQL text (extended query protocol, `PQexecParams`), so no
    /// value can change the statement. `nil` is SQL `NULL`.
    /// - Parameters:
    ///   - prepared: prepare the statement once per connection (`PQprepare`, keyed by the SQL text and
    ///     parameter types, at most 256 per connection) and reuse it (`PQexecPrepared`): saves the
    ///     server's parse and plan on hot statements. Works through a pool: each connection prepares
    ///     on its first use.
    /// - Throws: `PostgresError`: the server's error with its SQLSTATE (the connection stays usable),
    ///   `.connectionLost` when the connection dropped (`isRetryable`), `.connectionClosed` after
    ///   `close()`, `.queryCanceled` when the task was cancelled during the statement;
    ///   `CancellationError` when it was cancelled before the statement started.
    public func query(_ sql: String, _ parameters: [PostgresValue?] = [], prepared: Bool = false) async throws -> PostgresRows {
        try Self.checkTextParameters(parameters)
        return try await perform(cancellable: true) { $0.execute(sql, parameters, prepared: prepared) }
    }

    /// libpq passes text parameters as C strings, so a NUL byte would silently cut the value short
    /// (`"alice\0evil"` would be stored as `"alice"`); PostgreSQL's text cannot hold NUL at all, in a
    /// text value or in an element of a `text[]`.
    /// - Throws: `PostgresError` with SQLSTATE 22021 (character not in repertoire), naming the parameter.
    static func checkTextParameters(_ parameters: [PostgresValue?]) throws {
        for (index, parameter) in parameters.enumerated() {
            guard let parameter, parameter.textContainsNUL else { continue }
            throw PostgresError(
                code: .init(sqlState: "22021"),
                message: "parameter $\(index + 1) contains a NUL byte, which PostgreSQL text cannot store")
        }
    }

    /// Runs one command (`INSERT`, `UPDATE`, `DELETE`, DDL…) and returns the number of rows it
    /// affected (0 for commands that report none).
    /// - Throws: `PostgresError`, as `query(_:_:prepared:)`.
    @discardableResult
    public func execute(_ sql: String, _ parameters: [PostgresValue?] = [], prepared: Bool = false) async throws -> Int {
        try await query(sql, parameters, prepared: prepared).affectedRows
    }

    /// `query` that is not cancelled with its task: for clean-up statements that must run
    /// (`ROLLBACK`, releasing an advisory lock).
    func queryUncancellable(_ sql: String, _ parameters: [PostgresValue?] = []) async throws -> PostgresRows {
        try Self.checkTextParameters(parameters)
        return try await perform(cancellable: false) { $0.execute(sql, parameters) }
    }

    /// Runs a script of one or more `;`-separated statements with the simple query protocol
    /// (`PQexec`); for fixed SQL such as migrations. It takes no parameters: never build it from values.
    /// Outside a transaction block, the statements of one script run in one implicit transaction.
    /// - Returns: the last statement's result.
    /// - Throws: `PostgresError` of the first statement that failed.
    @discardableResult
    public func executeScript(_ sql: String) async throws -> PostgresRows {
        try await perform(cancellable: true) { $0.executeScript(sql) }
    }

    /// Runs `body` inside `BEGIN` … `COMMIT`, and `ROLLBACK` when `body` throws.
    ///
    /// - Parameters:
    ///   - isolationLevel: the isolation level (`BEGIN ISOLATION LEVEL …`); the server default when `nil`.
    ///   - body: the transaction's work, on this connection. Do not nest `withTransaction`.
    /// - Returns: what `body` returns, once `COMMIT` succeeded.
    /// - Throws: what `body` throws (after the rollback), or `PostgresError` from `BEGIN`/`COMMIT`:
    ///   `.serializationFailure`/`.deadlockDetected` (retry the whole transaction), and
    ///   `.inFailedTransaction` when a statement failed inside `body` whose error `body` swallowed
    ///   (the server then rolled back instead of committing).
    public func withTransaction<T>(
        isolationLevel: PostgresIsolationLevel? = nil,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        _ = try await query(isolationLevel.map { "BEGIN ISOLATION LEVEL \($0.sql)" } ?? "BEGIN")
        let value: T
        do {
            value = try await body(self)
        } catch {
            await rollbackAfterFailure()
            throw error
        }
        let commit: PostgresRows
        do {
            commit = try await perform(cancellable: false) { $0.execute("COMMIT", []) }
        } catch {
            await rollbackAfterFailure()
            throw error
        }
        if commit.commandTag == "ROLLBACK" {
            throw PostgresError(
                code: .inFailedTransaction,
                message: "COMMIT rolled the transaction back: a statement inside it failed and its error was caught")
        }
        return value
    }

    /// Reads what the server sent while the connection was idle, without blocking, and reports whether
    /// the connection is still usable (a backend ended by `pg_terminate_backend` or a server shutdown
    /// is detected here without a round trip).
    public func checkAlive() async -> Bool {
        let alive = (try? await thread.run { [handle] in handle.probe() }) ?? false
        let wasConnected = state.withLock { state in
            defer { state.isConnected = state.isConnected && alive }
            return state.isConnected
        }
        if wasConnected, !alive, !state.withLock({ $0.isClosed }) {
            logger.warning("PostgreSQL connection lost while idle")
        }
        return alive && !state.withLock { $0.isClosed }
    }

    /// Closes the connection (sends Terminate) and ends its thread. Idempotent. Statements issued
    /// afterwards fail with `.connectionClosed`.
    public func close() async {
        let alreadyClosed = state.withLock { state in
            defer { state.isClosed = true }
            return state.isClosed
        }
        guard !alreadyClosed else { return }
        _ = try? await thread.run { [handle] in handle.finish() }
        thread.shutdown()
    }

    private func rollbackAfterFailure() async {
        guard state.withLock({ $0.isConnected && $0.isInTransaction && !$0.isClosed }) else { return }
        do {
            _ = try await perform(cancellable: false) { $0.execute("ROLLBACK", []) }
        } catch {
            logger.warning("ROLLBACK failed", ["error": "\(error)"])
        }
    }

    /// Runs `job` on the connection's thread and records the connection's state after it.
    private func perform(
        cancellable: Bool, _ job: @escaping @Sendable (PQConnection) -> Result<PostgresRows, PostgresError>
    ) async throws -> PostgresRows {
        if cancellable, Task.isCancelled { throw CancellationError() }
        let handle = self.handle
        let run: @Sendable () async throws -> Result<PostgresRows, PostgresError> = { [self] in
            do {
                return try await thread.run {
                    let result = job(handle)
                    let connected = handle.isConnected
                    let inTransaction = handle.isInTransaction
                    let justLost = self.state.withLock { state in
                        defer {
                            state.isConnected = connected
                            state.isInTransaction = inTransaction
                        }
                        return state.isConnected && !connected
                    }
                    if justLost, case .failure(let error) = result {
                        self.logger.warning("PostgreSQL connection lost", ["error": error.message])
                    }
                    return result
                }
            } catch {
                return .failure(PostgresError(code: .connectionClosed, message: "the connection was closed"))
            }
        }
        let result = cancellable
            ? try await withTaskCancellationHandler(operation: run, onCancel: { handle.cancelRunningStatement() })
            : try await run()
        switch result {
        case .success(let rows):
            return rows
        case .failure(let error):
            throw error
        }
    }
}

private let connectionCounter = Atomic<Int>(0)
