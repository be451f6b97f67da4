import ServiceCore
import Synchronization

/// A bounded pool of `PostgresConnection`s.
///
/// Checkouts take an idle connection, open a new one while fewer than `maximumConnections` are open,
/// or wait in FIFO order up to `checkoutTimeout`. Before handing out an idle connection the pool checks
/// it without a round trip (`checkAlive()`), so a backend ended by `pg_terminate_backend` or a server
/// restart is replaced instead of failing the caller's first statement. Connections that break
/// during use, or that are returned inside an open transaction, are closed and discarded.
public final class PostgresPool: Sendable {
    /// A snapshot of the pool's counters.
    public struct Statistics: Sendable, Hashable {
        /// Connections open or being opened (idle + leased + connecting).
        public let open: Int
        /// Connections ready for a checkout.
        public let idle: Int
        /// Connections handed out and not yet returned.
        public let leased: Int
        /// Checkouts waiting for a connection.
        public let waiting: Int
        /// Connections opened since the pool was created.
        public let created: Int
        /// Connections discarded as broken since the pool was created.
        public let discarded: Int
        /// The most connections the pool opens (`PostgresPoolConfiguration.maximumConnections`).
        public let maximum: Int
        /// Checkouts that had to wait for a connection since the pool was created (all connections
        /// leased and `maximum` open), however the wait ended.
        public let waits: Int
        /// The time those checkouts spent waiting, in total (ended waits only). With `waits`, the
        /// average wait; its rate over time says how much work queued for the pool.
        public let waitTime: Duration
    }

    /// The pool's settings.
    public let configuration: PostgresPoolConfiguration
    private let logger: Logger
    private let state: Mutex<State>

    private struct State {
        var machine: PoolStateMachine<PostgresConnection>
        /// Waiters that suspended; a delivery for a waiter that has not suspended yet is kept in `early`.
        var continuations: [Int: CheckedContinuation<PoolStateMachine<PostgresConnection>.Grant, any Error>] = [:]
        var early: [Int: Result<PoolStateMachine<PostgresConnection>.Grant, any Error>] = [:]
        /// `Statistics.waitTime` so far.
        var waitTime: Duration = .zero
    }

    /// Creates a pool; no connection is opened before `start()` or the first checkout.
    public init(configuration: PostgresPoolConfiguration, logger: Logger = Logger(label: "postgres.pool")) {
        self.configuration = configuration
        self.logger = logger
        self.state = Mutex(State(machine: PoolStateMachine(maximum: configuration.maximumConnections)))
    }

    /// Opens `minimumConnections` connections, so that a wrong URL or an unreachable server fails at
    /// start-up.
    /// - Throws: `PostgresError` `.connectionFailed` from the first connection that failed.
    public func start() async throws {
        var opened: [PostgresConnection] = []
        do {
            for _ in 0..<configuration.minimumConnections {
                opened.append(try await checkout(deadline: .now + configuration.checkoutTimeout))
            }
        } catch {
            for connection in opened { await release(connection) }
            throw error
        }
        for connection in opened { await release(connection) }
    }

    /// Lends a connection to `body` and takes it back when `body` returns or throws.
    /// - Throws: `PostgresError` `.poolTimeout` when none became free within `checkoutTimeout`,
    ///   `.poolClosed`, `.connectionFailed`; `CancellationError` when the task was cancelled while
    ///   waiting; and whatever `body` throws.
    public func withConnection<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await checkout(deadline: .now + configuration.checkoutTimeout)
        do {
            let value = try await body(connection)
            await release(connection)
            return value
        } catch {
            await release(connection)
            throw error
        }
    }

    /// Runs `body` in a transaction on a pooled connection (see `PostgresConnection.withTransaction`).
    /// - Throws: as `withConnection` and `PostgresConnection.withTransaction`.
    public func withTransaction<T>(
        isolationLevel: PostgresIsolationLevel? = nil,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await withConnection { connection in
            try await connection.withTransaction(isolationLevel: isolationLevel) { try await body($0) }
        }
    }

    /// Runs one statement on a pooled connection (see `PostgresConnection.query`).
    /// - Throws: as `withConnection` and `PostgresConnection.query`.
    public func query(_ sql: String, _ parameters: [PostgresValue?] = [], prepared: Bool = false) async throws -> PostgresRows {
        try await withConnection { try await $0.query(sql, parameters, prepared: prepared) }
    }

    /// Runs one command on a pooled connection and returns the affected row count.
    /// - Throws: as `withConnection` and `PostgresConnection.query`.
    @discardableResult
    public func execute(_ sql: String, _ parameters: [PostgresValue?] = [], prepared: Bool = false) async throws -> Int {
        try await withConnection { try await $0.execute(sql, parameters, prepared: prepared) }
    }

    /// Checks that the database answers: runs `SELECT 1` on a pooled connection.
    /// - Returns: the round-trip time, checkout included.
    /// - Throws: `PostgresError` as `withConnection`.
    @discardableResult
    public func healthCheck() async throws -> Duration {
        let clock = ContinuousClock()
        let start = clock.now
        _ = try await query("SELECT 1")
        return clock.now - start
    }

    /// The pool's current counters.
    public var statistics: Statistics {
        state.withLock { state in
            let machine = state.machine
            return Statistics(
                open: machine.open, idle: machine.idle.count, leased: machine.leased, waiting: machine.waiters.count,
                created: machine.created, discarded: machine.discarded, maximum: machine.maximum, waits: machine.waits,
                waitTime: state.waitTime)
        }
    }

    /// Shuts the pool: fails waiting checkouts with `.poolClosed`, closes idle connections, and closes
    /// leased ones when they come back. Later checkouts fail with `.poolClosed`. Idempotent.
    public func close() async {
        let (closing, failed) = state.withLock { state in
            let (closing, failedIDs) = state.machine.close()
            let error = PostgresError(code: .poolClosed, message: "the pool is shut down")
            let failed = failedIDs.compactMap { id in Self.take(id, .failure(error), in: &state) }
            return (closing, failed)
        }
        for resume in failed { resume() }
        for connection in closing { await connection.close() }
    }

    // MARK: - Checkout and release

    private func checkout(deadline: ContinuousClock.Instant) async throws -> PostgresConnection {
        while true {
            let action = state.withLock { $0.machine.checkout() }
            let grant: PoolStateMachine<PostgresConnection>.Grant
            switch action {
            case .fail(let error):
                throw error
            case .use(let connection):
                grant = .connection(connection)
            case .connect:
                grant = .permitToConnect
            case .wait(let waiterID):
                let started = ContinuousClock.now
                defer { state.withLock { $0.waitTime += ContinuousClock.now - started } }
                grant = try await waitForGrant(waiterID, deadline: deadline)
            }
            switch grant {
            case .connection(let connection):
                if await connection.checkAlive() { return connection }
                logger.notice("discarding a broken idle connection", ["pg.pid": String(connection.backendPID)])
                await release(connection)
            case .permitToConnect:
                return try await openConnection()
            }
        }
    }

    private func openConnection() async throws -> PostgresConnection {
        do {
            let connection = try await PostgresConnection.connect(configuration.conninfo, password: configuration.password, logger: logger)
            state.withLock { $0.machine.connected() }
            return connection
        } catch {
            let resume = state.withLock { state in
                state.machine.connectFailed().flatMap { Self.take($0.waiterID, $0.result, in: &state) }
            }
            resume?()
            throw error
        }
    }

    private func release(_ connection: PostgresConnection) async {
        let reusable = connection.isConnected && !connection.isInTransaction
        if connection.isConnected, connection.isInTransaction {
            logger.warning("a connection came back inside a transaction; closing it", ["pg.pid": String(connection.backendPID)])
        }
        let (toClose, resume) = state.withLock { state in
            let (toClose, delivery) = state.machine.release(connection, reusable: reusable)
            return (toClose, delivery.flatMap { Self.take($0.waiterID, $0.result, in: &state) })
        }
        resume?()
        if let toClose { await toClose.close() }
    }

    /// Suspends until the waiter `waiterID` is granted a connection or a permit to open one.
    ///
    /// - Throws: `PostgresError` `.poolTimeout` when `deadline` passes first (the deadline is a child
    ///   task of a task group, cancelled as soon as the waiter is served); `CancellationError` when the
    ///   calling task is cancelled while it waits.
    private func waitForGrant(_ waiterID: Int, deadline: ContinuousClock.Instant) async throws -> PoolStateMachine<PostgresConnection>.Grant {
        let timeout = configuration.checkoutTimeout
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                // Cancelled (the waiter was served or gave up): the sleep throws and nothing expires.
                try await Task.sleep(until: deadline, clock: .continuous)
                expire(waiterID, PostgresError(
                    code: .poolTimeout,
                    message: "no connection became free within \(timeout) (maximum \(configuration.maximumConnections) connections)"))
            }
            defer { group.cancelAll() }
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let early = state.withLock { state -> Result<PoolStateMachine<PostgresConnection>.Grant, any Error>? in
                        if let result = state.early.removeValue(forKey: waiterID) { return result }
                        state.continuations[waiterID] = continuation
                        return nil
                    }
                    if let early { continuation.resume(with: early) }
                }
            } onCancel: {
                expire(waiterID, nil)
            }
        }
    }

    /// Fails the waiter `waiterID` when it is still waiting (`nil` error: cancelled).
    private func expire(_ waiterID: Int, _ error: PostgresError?) {
        let resume = state.withLock { state -> (() -> Void)? in
            guard state.machine.abandon(waiterID: waiterID) else { return nil }
            if let continuation = state.continuations.removeValue(forKey: waiterID) {
                return { error.map { continuation.resume(throwing: $0) } ?? continuation.resume(throwing: CancellationError()) }
            }
            state.early[waiterID] = .failure(error.map { $0 as any Error } ?? CancellationError())
            return nil
        }
        resume?()
    }

    /// Removes the waiter's continuation and returns the call that resumes it (run it after
    /// unlocking); keeps the result for a waiter that has not suspended yet.
    private static func take(
        _ waiterID: Int, _ result: Result<PoolStateMachine<PostgresConnection>.Grant, PostgresError>, in state: inout State
    ) -> (() -> Void)? {
        if let continuation = state.continuations.removeValue(forKey: waiterID) {
            return { continuation.resume(with: result.mapError { $0 as any Error }) }
        }
        state.early[waiterID] = result.mapError { $0 as any Error }
        return nil
    }
}
