import APNs
import Testing

/// `APNsCircuitBreaker` without I/O: opening, half-open trials, closing and the ramp.
@Suite struct CircuitBreakerTests {
    var policy: APNsCircuitBreaker.Policy {
        var policy = APNsCircuitBreaker.Policy()
        policy.failureThreshold = 5
        policy.window = .seconds(10)
        policy.minimumConnections = 2
        policy.openBackoff = .init(initial: .seconds(2), maximum: .seconds(30))
        policy.halfOpenWait = .seconds(1)
        policy.trialTimeout = .seconds(45)
        policy.rampUp = .seconds(5)
        return policy
    }

    @Test func opensWhenFailuresDominateTheWindowOverSeveralConnections() {
        var breaker = APNsCircuitBreaker(policy: policy)
        for i in 0..<4 { #expect(breaker.recordFailure(connection: i % 2, nowMilliseconds: Int64(i) * 100) == nil) }
        let opened = breaker.recordFailure(connection: 0, nowMilliseconds: 400)
        #expect(opened == .init(from: .closed, to: .open, openFor: .seconds(2)))
        #expect(breaker.state == .open)
        #expect(breaker.admit(nowMilliseconds: 1000, random: 0).0 == .wait(.milliseconds(1400)))
    }

    @Test func oneConnectionFailingDoesNotOpenIt() {
        var breaker = APNsCircuitBreaker(policy: policy)
        for i in 0..<20 { #expect(breaker.recordFailure(connection: 7, nowMilliseconds: Int64(i)) == nil) }
        #expect(breaker.state == .closed)
    }

    /// Successes count: failures spread among many answers (a few bad devices, a GOAWAY now and then)
    /// never open it, however many there are; the same failures without the answers do.
    @Test func failuresAmongManyAnswersDoNotOpenIt() {
        var breaker = APNsCircuitBreaker(policy: policy)
        var now: Int64 = 0
        for round in 0..<600 {
            for _ in 0..<2 { _ = breaker.recordSuccess(nowMilliseconds: now) }
            #expect(breaker.recordFailure(connection: round % 4, nowMilliseconds: now) == nil, "at \(now) ms")
            now += 50
        }
        #expect(breaker.state == .closed)
        #expect(breaker.counts(nowMilliseconds: now).failures > 100)
        // Answers stop (APNs fails for everyone): the failures now dominate the window, and it opens.
        var opened: APNsCircuitBreaker.Transition?
        var failuresToOpen = 0
        while opened == nil && failuresToOpen < 1000 {
            failuresToOpen += 1
            opened = breaker.recordFailure(connection: failuresToOpen % 4, nowMilliseconds: now)
            now += 10
        }
        #expect(opened?.to == .open)
        #expect(failuresToOpen < 250, "\(failuresToOpen) failures in a row to open")
    }

    @Test func oldAnswersAndFailuresLeaveTheWindow() {
        var breaker = APNsCircuitBreaker(policy: policy)
        for i in 0..<4 { _ = breaker.recordFailure(connection: i, nowMilliseconds: 0) }
        for _ in 0..<100 { _ = breaker.recordSuccess(nowMilliseconds: 1) }
        for i in 0..<4 { _ = breaker.recordFailure(connection: i, nowMilliseconds: 2) }
        #expect(breaker.state == .closed)
        // 11 s later the answers (and the earlier failures) left the window: five failures open it.
        for i in 0..<4 { _ = breaker.recordFailure(connection: i, nowMilliseconds: 11_000) }
        #expect(breaker.state == .closed)
        _ = breaker.recordFailure(connection: 9, nowMilliseconds: 11_001)
        #expect(breaker.state == .open)
    }

    /// The half-open trial is never a notification with a failure of its own: callers that may not
    /// probe wait, the first that may goes.
    @Test func halfOpenTrialIsOnlyANotificationThatMayProbe() {
        var breaker = opened()
        let (first, transition) = breaker.admit(nowMilliseconds: 2_000, random: 0, mayProbe: false)
        #expect(first == .wait(.seconds(1)))
        #expect(transition?.to == .halfOpen)
        for t in [2_100, 30_000, 60_000] as [Int64] {
            #expect(breaker.admit(nowMilliseconds: t, random: 0, mayProbe: false).0 == .wait(.seconds(1)), "no trial at \(t)")
        }
        #expect(breaker.admit(nowMilliseconds: 60_001, random: 0, mayProbe: true).0 == .trial)
        #expect(breaker.admit(nowMilliseconds: 60_002, random: 0, mayProbe: true).0 == .wait(.seconds(1)), "one trial at a time")
    }

    /// A trial that fails for its token's reason (its stream timed out on a connection that still
    /// answers) does not reopen the breaker: the next caller that may probe goes at once.
    @Test func anAbandonedTrialDoesNotReopen() {
        var breaker = opened()
        #expect(breaker.admit(nowMilliseconds: 2_000, random: 0).0 == .trial)
        breaker.abandonTrial(nowMilliseconds: 3_000)
        #expect(breaker.state == .halfOpen && breaker.openings == 1)
        #expect(breaker.admit(nowMilliseconds: 3_000, random: 0).0 == .trial)
        #expect(breaker.recordSuccess(nowMilliseconds: 3_010)?.to == .closed)
    }

    @Test func halfOpenLetsExactlyOneRealNotificationThrough() {
        var breaker = opened()
        #expect(breaker.admit(nowMilliseconds: 1_999, random: 0).0 == .wait(.milliseconds(1)))
        let (first, transition) = breaker.admit(nowMilliseconds: 2_000, random: 0)
        #expect(first == .trial)
        #expect(transition?.to == .halfOpen)
        for t in [2_001, 3_000, 40_000] as [Int64] {
            #expect(breaker.admit(nowMilliseconds: t, random: 0).0 == .wait(.seconds(1)), "one trial at a time")
        }
        // A trial that never reports lets another through after trialTimeout.
        #expect(breaker.admit(nowMilliseconds: 47_000, random: 0).0 == .trial)
    }

    @Test func aFailedTrialReopensForLongerCappedAndASuccessfulOneCloses() {
        var breaker = opened()
        var now: Int64 = 2_000
        var periods: [Duration] = []
        for _ in 0..<6 {
            #expect(breaker.admit(nowMilliseconds: now, random: 0).0 == .trial)
            let reopened = breaker.recordFailure(connection: 1, nowMilliseconds: now)
            periods.append(reopened!.openFor!)
            now += reopened!.openFor!.components.seconds * 1000
        }
        #expect(periods == [4, 8, 16, 30, 30, 30].map { Duration.seconds($0) })
        #expect(breaker.admit(nowMilliseconds: now, random: 0).0 == .trial)
        #expect(breaker.recordSuccess(nowMilliseconds: now) == .init(from: .halfOpen, to: .closed, openFor: nil))
        #expect(breaker.state == .closed && breaker.openings == 0)
    }

    @Test func sendingRampsUpOverSecondsAfterClosing() {
        var breaker = opened()
        _ = breaker.admit(nowMilliseconds: 2_000, random: 0)
        _ = breaker.recordSuccess(nowMilliseconds: 2_000)
        // 1,000 waiting retries ask at once: only about 5 % go, the others spread over the ramp.
        var sent = 0
        var latest: Duration = .zero
        for i in 0..<1000 {
            let random = Double(i) / 1000
            switch breaker.admit(nowMilliseconds: 2_000, random: random).0 {
            case .send: sent += 1
            case .wait(let wait):
                #expect(wait <= .seconds(5))
                latest = max(latest, wait)
            case .trial: Issue.record("no trial when closed")
            }
        }
        #expect(sent == 50)
        #expect(latest > .seconds(4))
        // Halfway through, about half go; after the ramp, all.
        #expect(breaker.admit(nowMilliseconds: 4_500, random: 0.49).0 == .send)
        #expect(breaker.admit(nowMilliseconds: 4_500, random: 0.51).0 != .send)
        #expect(breaker.admit(nowMilliseconds: 7_000, random: 0.99).0 == .send)
    }

    /// The dice are drawn only while the ramp runs: a closed breaker admits every send without asking
    /// the random source (one system call per send, before).
    @Test func theDiceAreDrawnOnlyDuringTheRamp() {
        var draws = 0
        func dice() -> Double {
            draws += 1
            return 0.99
        }
        var closed = APNsCircuitBreaker(policy: policy)
        for now in stride(from: Int64(0), to: 10_000, by: 100) {
            #expect(closed.admit(nowMilliseconds: now, random: dice()).0 == .send)
        }
        #expect(draws == 0)
        var ramping = opened()
        #expect(ramping.admit(nowMilliseconds: 2_000, random: dice()).0 == .trial)
        _ = ramping.recordSuccess(nowMilliseconds: 2_000)
        #expect(draws == 0)
        #expect(ramping.admit(nowMilliseconds: 3_000, random: dice()).0 != .send)
        #expect(draws == 1)
        #expect(ramping.admit(nowMilliseconds: 7_000, random: dice()).0 == .send)
        #expect(draws == 1, "the ramp is over")
    }

    private func opened() -> APNsCircuitBreaker {
        var breaker = APNsCircuitBreaker(policy: policy)
        for i in 0..<5 { _ = breaker.recordFailure(connection: i, nowMilliseconds: 0) }
        #expect(breaker.state == .open)
        return breaker
    }
}
