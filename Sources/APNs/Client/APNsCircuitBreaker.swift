import ServiceCore

/// The circuit breaker of one (credentials, environment) pool (docs/apns-client.md "Circuit
/// breaker"): when APNs fails for everyone, stop sending instead of spending every notification's
/// retries, and come back without a stampede. It sees only Apple-wide trouble: what one device token
/// does (a 429 `TooManyRequests`, streams that time out while the connection answers others) is that
/// token's failure, handled by ``APNsDeviceGates``, and never reaches it.
///
/// - **closed**: every send goes. Within the sliding ``Policy/window`` it counts answers (any status
///   below 500 but a 429 that is not about one device: APNs is up even when it refuses a notification)
///   and Apple-wide failures (5xx answers, lost connections and transport errors, GOAWAY, PINGs not
///   answered, failed opens). It opens when the failures are at least ``Policy/failureThreshold``,
///   at least ``Policy/failureRatio`` of everything counted, and span ``Policy/minimumConnections``
///   distinct connections.
/// - **open**: nothing is sent; callers wait (no attempt spent). After the open period (capped
///   exponential: ``Policy/openBackoff`` by the number of consecutive openings) it is half-open.
/// - **half-open**: the first caller that may probe is let through: one real notification that has no
///   failure of its own (never a probe push, never a retry of a device token with a failure history).
///   Everyone else waits ``Policy/halfOpenWait``. Its answer closes the breaker, an Apple-wide failure
///   opens it again for longer; a trial that fails for a token-specific reason
///   (``abandonTrial(nowMilliseconds:)``) or has no result after ``Policy/trialTimeout`` lets another through.
/// - **closing ramp**: for ``Policy/rampUp`` after closing, a caller is let through with probability
///   elapsed/rampUp (at least 5 %); the others wait a random part of the rest of the ramp, so thousands
///   of waiting retries do not fire at once.
///
/// A pure value: time (ms, any monotonic origin) and randomness are passed in.
public struct APNsCircuitBreaker: Sendable {
    /// Thresholds and timings.
    public struct Policy: Sendable, Hashable {
        /// Fewest Apple-wide failures within ``window`` that open the breaker. Default 5.
        public var failureThreshold: Int = 5
        /// Least share (0…1) of failures among the answers and failures within ``window`` that opens
        /// the breaker. Default 0.5.
        public var failureRatio: Double = 0.5
        /// The sliding window over which answers and failures are counted (in tenths). Default 10 s.
        public var window: Duration = .seconds(10)
        /// Distinct connections the window's failures must span. Default 2 (a pool of one connection: 1).
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
        /// Send as the half-open trial: report its outcome with ``recordSuccess(nowMilliseconds:)``,
        /// ``recordFailure(connection:nowMilliseconds:)`` or ``abandonTrial(nowMilliseconds:)``.
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
    private var buckets = [Bucket](repeating: Bucket(), count: Self.bucketCount)
    private var openUntil: Int64 = 0
    private var trialStartedAt: Int64?
    private var rampStart: Int64?

    /// Creates a closed breaker.
    public init(policy: Policy = Policy()) {
        self.policy = policy
    }

    /// Asks whether a send may go at `now` (ms). `random` is a number in 0…1 (the ramp's dice), drawn
    /// only while the ramp runs: a closed breaker admits without it (no call to the system's random
    /// source per send). `mayProbe`: the notification may be the half-open trial (it has no failure of
    /// its own and its device token no failure history); others wait while the breaker is half-open.
    public mutating func admit(nowMilliseconds now: Int64, random: @autoclosure () -> Double, mayProbe: Bool = true) -> (Admission, Transition?) {
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
            let dice = random()
            if dice < share { return (.send, nil) }
            let rest = Double(ramp - elapsed)
            return (.wait(.milliseconds(max(1, Int64(rest * dice)))), nil)
        case .open:
            if now < openUntil { return (.wait(.milliseconds(openUntil - now)), nil) }
            state = .halfOpen
            guard mayProbe else {
                trialStartedAt = nil
                return (.wait(policy.halfOpenWait), Transition(from: .open, to: .halfOpen))
            }
            trialStartedAt = now
            return (.trial, Transition(from: .open, to: .halfOpen))
        case .halfOpen:
            if let started = trialStartedAt, now - started < policy.trialTimeout.wholeMilliseconds {
                return (.wait(policy.halfOpenWait), nil)
            }
            guard mayProbe else { return (.wait(policy.halfOpenWait), nil) }
            trialStartedAt = now
            return (.trial, nil)
        }
    }

    /// The half-open trial failed for a reason that is its device token's, not Apple's (its stream
    /// timed out while its connection still answers PINGs, a 429 `TooManyRequests`): the breaker
    /// stays half-open and lets the next caller that may probe through at once.
    public mutating func abandonTrial(nowMilliseconds now: Int64) {
        guard state == .halfOpen else { return }
        trialStartedAt = nil
    }

    /// Answers and failures counted within the window ending at `now` (ms).
    public func counts(nowMilliseconds now: Int64) -> (answers: Int, failures: Int) {
        let index = bucketIndex(now)
        var answers = 0
        var failures = 0
        for bucket in buckets where bucket.index > index - Int64(Self.bucketCount) && bucket.index <= index {
            answers += bucket.answers
            failures += bucket.failures
        }
        return (answers, failures)
    }

    /// APNs answered (any status below 500 but a 429 that is not about one device) at `now`.
    public mutating func recordSuccess(nowMilliseconds now: Int64) -> Transition? {
        guard state != .closed else {
            update(now) { $0.answers += 1 }
            return nil
        }
        clearBuckets()
        let from = state
        state = .closed
        openings = 0
        trialStartedAt = nil
        rampStart = now
        return Transition(from: from, to: .closed)
    }

    /// An Apple-wide failure at `now`: a 5xx answer (or a 429 not about one device), a lost
    /// connection or transport error, a GOAWAY, an unanswered PING, a failed open. `connection`
    /// identifies the connection (distinct negative numbers for failed opens).
    public mutating func recordFailure(connection: Int, nowMilliseconds now: Int64) -> Transition? {
        switch state {
        case .open:
            return nil
        case .halfOpen:
            return open(now: now, from: .halfOpen)
        case .closed:
            let minimumConnections = max(1, policy.minimumConnections)
            update(now) { bucket in
                bucket.failures += 1
                if bucket.connections.count < minimumConnections, !bucket.connections.contains(connection) {
                    bucket.connections.append(connection)
                }
            }
            let (answers, failures) = counts(nowMilliseconds: now)
            guard failures >= policy.failureThreshold else { return nil }
            guard Double(failures) >= policy.failureRatio * Double(answers + failures) else { return nil }
            let index = bucketIndex(now)
            var connections: Set<Int> = []
            for bucket in buckets where bucket.index > index - Int64(Self.bucketCount) && bucket.index <= index {
                connections.formUnion(bucket.connections)
            }
            guard connections.count >= minimumConnections else { return nil }
            return open(now: now, from: .closed)
        }
    }

    /// One tenth of the window: its answers, failures and (up to `minimumConnections`) failing connections.
    private struct Bucket: Sendable {
        var index: Int64 = .min
        var answers = 0
        var failures = 0
        var connections: [Int] = []
    }

    private static let bucketCount = 10

    private var bucketWidth: Int64 { max(1, policy.window.wholeMilliseconds / Int64(Self.bucketCount)) }

    private func bucketIndex(_ now: Int64) -> Int64 { now >= 0 ? now / bucketWidth : (now - bucketWidth + 1) / bucketWidth }

    private func slot(_ index: Int64) -> Int {
        let count = Int64(Self.bucketCount)
        return Int(((index % count) + count) % count)
    }

    /// Changes the bucket of `now`, emptied first when it last held an older tenth.
    private mutating func update(_ now: Int64, _ change: (inout Bucket) -> Void) {
        let index = bucketIndex(now)
        let slot = slot(index)
        if buckets[slot].index != index { buckets[slot] = Bucket(index: index) }
        change(&buckets[slot])
    }

    private mutating func clearBuckets() {
        for i in buckets.indices { buckets[i] = Bucket() }
    }

    private mutating func open(now: Int64, from: State) -> Transition {
        openings += 1
        clearBuckets()
        rampStart = nil
        trialStartedAt = nil
        let period = policy.openBackoff.delay(afterFailures: openings, random: 1)
        openUntil = now + period.wholeMilliseconds
        state = .open
        return Transition(from: from, to: .open, openFor: period)
    }
}
