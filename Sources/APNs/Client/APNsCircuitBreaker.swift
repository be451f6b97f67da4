import ServiceCore

/// The circuit breaker of one (credentials, environment) pool (docs/apns-client.md "Circuit
/// breaker"): when APNs fails for everyone, stop sending instead of spending every notification's
/// retries, and come back without a stampede.
///
/// - **closed**: every send goes. A run of ``Policy/failureThreshold`` failures (5xx answers, lost
///   connections, timed-out streams, failed opens) without a success in between, within
///   ``Policy/window`` and on at least ``Policy/minimumConnections`` distinct connections, opens it.
///   Any answer below 500 is a success (APNs is up even when it refuses a notification).
/// - **open**: nothing is sent; callers wait (no attempt spent). After the open period (capped
///   exponential: ``Policy/openBackoff`` by the number of consecutive openings) it is half-open.
/// - **half-open**: the first caller is let through: one real, queued notification, never a probe
///   push. Everyone else waits ``Policy/halfOpenWait``. Its success closes the breaker, its failure
///   opens it again for longer; a trial without a result after ``Policy/trialTimeout`` lets another through.
/// - **closing ramp**: for ``Policy/rampUp`` after closing, a caller is let through with probability
///   elapsed/rampUp (at least 5 %); the others wait a random part of the rest of the ramp, so thousands
///   of waiting retries do not fire at once.
///
/// A pure value: time (ms, any monotonic origin) and randomness are passed in.
public struct APNsCircuitBreaker: Sendable {
    /// Thresholds and timings.
    public struct Policy: Sendable, Hashable {
        /// Failures in a run that open the breaker. Default 5.
        public var failureThreshold: Int = 5
        /// The run's failures must all fall within this. Default 10 s.
        public var window: Duration = .seconds(10)
        /// Distinct connections the run must span. Default 2 (a pool of one connection: 1).
        public var minimumConnections: Int = 2
        /// Open period by consecutive openings: 2 s doubling to 30 s (no jitter: one timer per pool).
        public var openBackoff = APNsClient.Configuration.Backoff(initial: .seconds(2), maximum: .seconds(30))
        /// How long callers wait while the half-open trial is out. Default 1 s.
        public var halfOpenWait: Duration = .seconds(1)
        /// A trial without a result for this long lets another caller through. Default 45 s.
        public var trialTimeout: Duration = .seconds(45)
        /// Sending ramps up over this after closing. Default 5 s.
        public var rampUp: Duration = .seconds(5)

        /// The defaults listed on each property.
        public init() {}
    }

    /// The breaker's state, as the metric `push_apns_circuit_state` shows it.
    public enum State: Int, Sendable, Hashable {
        /// Sending normally (possibly ramping up).
        case closed = 0
        /// One trial notification may go.
        case halfOpen = 1
        /// Nothing is sent.
        case open = 2
    }

    /// What a caller about to send must do.
    public enum Admission: Sendable, Hashable {
        /// Send now.
        case send
        /// Send as the half-open trial: report its outcome with ``recordSuccess(nowMilliseconds:)`` or
        /// ``recordFailure(connection:nowMilliseconds:)``.
        case trial
        /// Do not send; ask again after this.
        case wait(Duration)
    }

    /// A change worth a log line and a metric update.
    public struct Transition: Sendable, Hashable {
        /// The state before.
        public var from: State
        /// The state after.
        public var to: State
        /// For openings: how long it stays open.
        public var openFor: Duration?

        /// Creates a transition.
        public init(from: State, to: State, openFor: Duration? = nil) {
            self.from = from
            self.to = to
            self.openFor = openFor
        }
    }

    /// The policy in force.
    public let policy: Policy
    /// The current state.
    public private(set) var state: State = .closed
    /// Consecutive openings (reset when a trial succeeds).
    public private(set) var openings = 0
    private var run: [(at: Int64, connection: Int)] = []
    private var openUntil: Int64 = 0
    private var trialStartedAt: Int64?
    private var rampStart: Int64?

    /// Creates a closed breaker.
    public init(policy: Policy = Policy()) {
        self.policy = policy
    }

    /// Asks whether a send may go at `now` (ms). `random` is a number in 0…1 (the ramp's dice).
    public mutating func admit(nowMilliseconds now: Int64, random: Double) -> (Admission, Transition?) {
        switch state {
        case .closed:
            guard let start = rampStart else { return (.send, nil) }
            let ramp = policy.rampUp.wholeMilliseconds
            let elapsed = now - start
            if elapsed >= ramp || ramp <= 0 {
                rampStart = nil
                return (.send, nil)
            }
            let share = max(0.05, Double(elapsed) / Double(ramp))
            if random < share { return (.send, nil) }
            let rest = Double(ramp - elapsed)
            return (.wait(.milliseconds(max(1, Int64(rest * random)))), nil)
        case .open:
            if now < openUntil { return (.wait(.milliseconds(openUntil - now)), nil) }
            state = .halfOpen
            trialStartedAt = now
            return (.trial, Transition(from: .open, to: .halfOpen))
        case .halfOpen:
            if let started = trialStartedAt, now - started < policy.trialTimeout.wholeMilliseconds {
                return (.wait(policy.halfOpenWait), nil)
            }
            trialStartedAt = now
            return (.trial, nil)
        }
    }

    /// APNs answered (any status below 500) at `now`.
    public mutating func recordSuccess(nowMilliseconds now: Int64) -> Transition? {
        run.removeAll()
        guard state != .closed else { return nil }
        let from = state
        state = .closed
        openings = 0
        trialStartedAt = nil
        rampStart = now
        return Transition(from: from, to: .closed)
    }

    /// A 5xx answer, a lost connection, a timed-out stream or a failed open at `now`. `connection`
    /// identifies the connection (distinct negative numbers for failed opens).
    public mutating func recordFailure(connection: Int, nowMilliseconds now: Int64) -> Transition? {
        switch state {
        case .open:
            return nil
        case .halfOpen:
            return open(now: now, from: .halfOpen)
        case .closed:
            run.append((now, connection))
            let horizon = now - policy.window.wholeMilliseconds
            run.removeAll { $0.at < horizon }
            guard run.count >= policy.failureThreshold else { return nil }
            guard Set(run.map(\.connection)).count >= max(1, policy.minimumConnections) else { return nil }
            return open(now: now, from: .closed)
        }
    }

    private mutating func open(now: Int64, from: State) -> Transition {
        openings += 1
        run.removeAll()
        rampStart = nil
        trialStartedAt = nil
        let period = policy.openBackoff.delay(afterFailures: openings, random: 1)
        openUntil = now + period.wholeMilliseconds
        state = .open
        return Transition(from: from, to: .open, openFor: period)
    }
}
