import Synchronization

/// The heartbeats of a process. Loops register theirs when they start and remove them when they
/// end on purpose (a closed consumer is not a wedged one).
public final class Heartbeats: Sendable {
    /// The process-wide set, read by the admin port's `/healthz`.
    public static let shared = Heartbeats()

    private let registered = Mutex<[ObjectIdentifier: Heartbeat]>([:])

    /// An empty set (tests make their own).
    public init() {}

    /// Adds a heartbeat named `name` and returns it.
    public func register(_ name: String) -> Heartbeat {
        let heartbeat = Heartbeat(name: name)
        registered.withLock { $0[ObjectIdentifier(heartbeat)] = heartbeat }
        return heartbeat
    }

    /// Removes `heartbeat` (its loop ended on purpose).
    public func remove(_ heartbeat: Heartbeat) {
        _ = registered.withLock { $0.removeValue(forKey: ObjectIdentifier(heartbeat)) }
    }

    /// Whether `heartbeat` itself is registered (by identity: several loops may share a name).
    public func contains(_ heartbeat: Heartbeat) -> Bool {
        registered.withLock { $0[ObjectIdentifier(heartbeat)] != nil }
    }

    /// Every registered heartbeat's name and age, sorted by name.
    public func snapshot() -> [(name: String, age: Duration)] {
        registered.withLock { Array($0.values) }.map { ($0.name, $0.age) }.sorted { $0.name < $1.name }
    }
}
