/// The retry of a record whose handling failed for a transient reason outside the record (PostgreSQL
/// or Kafka unavailable), as a value: each failure gives the wait before the next attempt and what to
/// log (docs/dispatcher-engine.md "Failures").
///
/// - The wait grows from `initialDelay`, doubling per failure up to `maximumDelay`; each wait is that
///   step scaled by a random factor in `1 - jitter ... 1`, so replicas that failed together do not
///   retry together.
/// - Each failure before `stuckThreshold` (measured from the first failure) is logged as a retry;
///   past it, the record is logged as stuck once per `stuckLogInterval` and not otherwise.
/// - A success starts over: the next failure waits `initialDelay` again and counts from zero.
struct InfrastructureRetry: Sendable {
    struct Settings: Sendable {
        var initialDelay: Duration
        var maximumDelay: Duration
        /// 0 ... 1: how far below its step a wait may fall.
        var jitter: Double = 0.2
        var stuckThreshold: Duration
        var stuckLogInterval: Duration
    }

    /// What the caller logs for one failure.
    enum Log: Sendable, Equatable {
        /// A warning: retrying after `delay`.
        case retrying
        /// An error: the record has been retried for `retryingFor` and still fails.
        case stuck(retryingFor: Duration)
        /// Nothing: stuck, and logged so less than `stuckLogInterval` ago.
        case quiet
    }

    struct Decision: Sendable, Equatable {
        /// How long to wait before the next attempt.
        var delay: Duration
        var log: Log
    }

    let settings: Settings
    /// Failures since the last success.
    private(set) var failures = 0
    private var firstFailure: ContinuousClock.Instant?
    private var lastStuckLog: ContinuousClock.Instant?

    init(_ settings: Settings) {
        self.settings = settings
    }

    /// The step before jitter for failure number `failures` (1-based): initial × 2^(n-1), capped.
    var step: Duration {
        var step = settings.initialDelay
        for _ in 1..<max(failures, 1) {
            if step >= settings.maximumDelay { break }
            step = step * 2
        }
        return min(step, settings.maximumDelay)
    }

    /// One more failure at `now`.
    mutating func failed<G: RandomNumberGenerator>(at now: ContinuousClock.Instant, using generator: inout G) -> Decision {
        failures += 1
        let first = firstFailure ?? now
        firstFailure = first
        let jitter = min(max(settings.jitter, 0), 1)
        let factor = jitter == 0 ? 1 : Double.random(in: (1 - jitter)...1, using: &generator)
        let delay = step * factor
        let elapsed = now - first
        guard elapsed >= settings.stuckThreshold else { return Decision(delay: delay, log: .retrying) }
        if let last = lastStuckLog, now - last < settings.stuckLogInterval {
            return Decision(delay: delay, log: .quiet)
        }
        lastStuckLog = now
        return Decision(delay: delay, log: .stuck(retryingFor: elapsed))
    }

    /// One more failure at `now`, with the system's random numbers.
    mutating func failed(at now: ContinuousClock.Instant) -> Decision {
        var generator = SystemRandomNumberGenerator()
        return failed(at: now, using: &generator)
    }

    /// The attempt succeeded: the next failure starts over.
    mutating func succeeded() {
        failures = 0
        firstFailure = nil
        lastStuckLog = nil
    }
}
