/// The bookkeeping of `PostgresPool`, free of I/O: events in, an action out; the pool performs the
/// action (connect, close, resume a waiter) after unlocking. Generic over the connection so it can be
/// tested alone.
struct PoolStateMachine<Connection> {
    /// What a waiter receives: an idle connection to use, or the right to open a new one (a slot in
    /// `open` is already reserved for it).
    enum Grant {
        case connection(Connection)
        case permitToConnect
    }

    enum CheckoutAction {
        case use(Connection)
        case connect
        case wait(waiterID: Int)
        case fail(PostgresError)
    }

    /// A grant or failure for the waiter `waiterID`, to deliver after unlocking.
    struct Delivery {
        let waiterID: Int
        let result: Result<Grant, PostgresError>
    }

    let maximum: Int
    private(set) var idle: [Connection] = []
    /// Idle + leased + being opened.
    private(set) var open = 0
    private(set) var leased = 0
    private(set) var waiters: [Int] = []
    private(set) var isClosed = false
    private(set) var created = 0
    private(set) var discarded = 0
    /// Checkouts that found no idle connection and no room to open one, and waited.
    private(set) var waits = 0
    private var nextWaiterID = 0

    init(maximum: Int) { self.maximum = maximum }

    mutating func checkout() -> CheckoutAction {
        if isClosed { return .fail(PostgresError(code: .poolClosed, message: "the pool is shut down")) }
        if let connection = idle.popLast() {
            leased += 1
            return .use(connection)
        }
        if open < maximum {
            open += 1
            return .connect
        }
        nextWaiterID += 1
        waits += 1
        waiters.append(nextWaiterID)
        return .wait(waiterID: nextWaiterID)
    }

    /// A connection opened for a `.connect` action or a permit.
    mutating func connected() {
        created += 1
        leased += 1
    }

    /// Opening a connection failed: its slot is free again, and the first waiter may try.
    mutating func connectFailed() -> Delivery? {
        open -= 1
        return permitFirstWaiter()
    }

    /// A connection that was used once (leased) is returned; `reusable` is false when it is broken
    /// or left a transaction open. Returns the connection to close, if any, and a delivery.
    mutating func release(_ connection: Connection, reusable: Bool) -> (close: Connection?, delivery: Delivery?) {
        leased -= 1
        if isClosed || !reusable {
            open -= 1
            if !isClosed { discarded += 1 }
            return (connection, permitFirstWaiter())
        }
        if !waiters.isEmpty {
            leased += 1
            return (nil, Delivery(waiterID: waiters.removeFirst(), result: .success(.connection(connection))))
        }
        idle.append(connection)
        return (nil, nil)
    }

    /// The waiter `waiterID` gives up (timeout, cancellation). Returns whether it was still waiting;
    /// when not, it was already granted something and must take it.
    mutating func abandon(waiterID: Int) -> Bool {
        guard let index = waiters.firstIndex(of: waiterID) else { return false }
        waiters.remove(at: index)
        return true
    }

    /// Shuts the pool: returns the idle connections to close and the waiters to fail.
    mutating func close() -> (close: [Connection], failed: [Int]) {
        isClosed = true
        let closing = idle
        idle = []
        open -= closing.count
        let failed = waiters
        waiters = []
        return (closing, failed)
    }

    private mutating func permitFirstWaiter() -> Delivery? {
        guard !isClosed, open < maximum, !waiters.isEmpty else { return nil }
        open += 1
        return Delivery(waiterID: waiters.removeFirst(), result: .success(.permitToConnect))
    }
}

extension PoolStateMachine.Grant: Sendable where Connection: Sendable {}
