@testable import Postgres

/// Drives `PoolStateMachine<String>` and renders its actions as short strings for assertions.
struct PoolStateMachineProbe {
    var machine: PoolStateMachine<String>
    init(maximum: Int) { machine = PoolStateMachine(maximum: maximum) }

    mutating func checkout() -> String {
        switch machine.checkout() {
        case .use(let connection): "use \(connection)"
        case .connect: "connect"
        case .wait(let id): "wait \(id)"
        case .fail(let error): "fail \(error.code)"
        }
    }

    mutating func connected() { machine.connected() }

    mutating func release(_ connection: String, reusable: Bool) -> String {
        let (close, delivery) = machine.release(connection, reusable: reusable)
        var parts: [String] = []
        if let close { parts.append("close \(close)") }
        if let delivery { parts.append("deliver \(delivery.waiterID) \(Self.render(delivery.result))") }
        return parts.joined(separator: ", ")
    }

    mutating func abandon(_ id: Int) -> Bool { machine.abandon(waiterID: id) }

    /// Checkouts that waited so far.
    var waits: Int { machine.waits }

    static func render(_ result: Result<PoolStateMachine<String>.Grant, PostgresError>) -> String {
        switch result {
        case .success(.connection(let connection)): "connection \(connection)"
        case .success(.permitToConnect): "permit"
        case .failure(let error): "failure \(error.code)"
        }
    }
}
