import Synchronization

/// Where a service leaves what `/readyz` decides from, as it starts, runs and stops: the service
/// registers readers of its Kafka clients' cached health, records each periodic database check, and
/// says which phase it is in; the admin port reads `inputs()` on its own thread. Readers must be
/// quick and synchronous (locks and atomics only): they run on every probe.
public final class ReadinessState: Sendable {
    /// Where the service is in its life.
    public enum Phase: String, Sendable {
        /// Dependencies not started yet: not ready.
        case starting
        /// Serving: readiness follows the checks.
        case running
        /// Graceful shutdown began: not ready, so that no new work is routed here.
        case stopping
    }

    private struct State {
        var phase: Phase = .starting
        var consumer: (@Sendable () -> ReadinessInputs.KafkaClient)?
        var producer: (@Sendable () -> ReadinessInputs.KafkaClient)?
        var usesDatabase = false
        var databaseCheck: (succeeded: Bool, detail: String, at: UInt64)?
        var informational: (@Sendable () -> [ProbeReport.Check])?
    }

    private let state = Mutex(State())

    /// A state in phase `starting`, with nothing registered.
    public init() {}

    /// Moves to `phase`.
    public func setPhase(_ phase: Phase) { state.withLock { $0.phase = phase } }

    /// The current phase.
    public var phase: Phase { state.withLock { $0.phase } }

    /// Registers (or, with nil, removes) the reader of the Kafka consumer's cached health.
    public func setConsumer(_ read: (@Sendable () -> ReadinessInputs.KafkaClient)?) { state.withLock { $0.consumer = read } }

    /// Registers (or, with nil, removes) the reader of the Kafka producer's cached health.
    public func setProducer(_ read: (@Sendable () -> ReadinessInputs.KafkaClient)?) { state.withLock { $0.producer = read } }

    /// Registers what the body shows without deciding readiness (Apple's reachability, faults).
    public func setInformational(_ read: (@Sendable () -> [ProbeReport.Check])?) { state.withLock { $0.informational = read } }

    /// Declares that the service depends on a database: until the first `recordDatabaseCheck` it is not ready.
    public func usesDatabase() { state.withLock { $0.usesDatabase = true } }

    /// Records the outcome of a periodic database check that finished now.
    /// - Parameters:
    ///   - succeeded: whether the check query answered.
    ///   - detail: the round-trip time, or the error.
    public func recordDatabaseCheck(succeeded: Bool, detail: String) {
        let now = Heartbeat.monotonicNanoseconds()
        state.withLock { $0.databaseCheck = (succeeded, detail, now) }
    }

    /// The observations as of now, with the phase as a check of its own (`service`).
    public func inputs() -> ReadinessInputs {
        let (phase, consumer, producer, usesDatabase, check, informational) = state.withLock { s in
            (s.phase, s.consumer, s.producer, s.usesDatabase, s.databaseCheck, s.informational)
        }
        let now = Heartbeat.monotonicNanoseconds()
        var inputs = ReadinessInputs(
            consumer: consumer?(), producer: producer?(), usesDatabase: usesDatabase,
            databaseCheck: check.map { .init(succeeded: $0.succeeded, age: .nanoseconds(Int64(now > $0.at ? now - $0.at : 0)), detail: $0.detail) },
            informational: informational?() ?? [])
        inputs.phase = phase
        return inputs
    }
}
