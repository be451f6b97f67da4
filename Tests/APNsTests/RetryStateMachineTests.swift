import APNs
import Foundation
import Testing

/// `APNsRetryStateMachine` without I/O: every documented reason and every fault, event in, action out.
@Suite struct RetryStateMachineTests {
    static let policy = APNsRetryStateMachine.Policy(
        backoff: .init(initial: .milliseconds(100), maximum: .seconds(10)), tooManyRequestsDelay: .seconds(1),
        providerTokenUpdateDelay: .seconds(5), maxUnprocessedResends: 3)
    static let now: Int64 = 1_800_000_000_000

    /// A machine with a deadline `horizon` after `now` and no jitter (factor 1).
    func machine(horizon: Duration = .seconds(60)) -> APNsRetryStateMachine {
        APNsRetryStateMachine(policy: Self.policy, deadlineMilliseconds: Self.now + horizon.wholeMillisecondsForTest, random: { 1 })
    }

    @Test func everyDocumentedReasonGetsItsAction() {
        for reason in APNsReason.documented {
            var machine = machine()
            let action = machine.handle(.response(status: reason.httpStatus!, reason: reason), nowMilliseconds: Self.now)
            let expected: APNsRetryStateMachine.Action
            switch reason {
            case .internalServerError, .serviceUnavailable:
                expected = .retry(after: .milliseconds(100), reason: .serverError(status: reason.httpStatus!), change: .none)
            case .shutdown, .idleTimeout:
                expected = .retry(after: .zero, reason: nil, change: .retire)
            case .expiredProviderToken:
                expected = .retry(after: .zero, reason: nil, change: .retireAndRenewProviderToken)
            case .tooManyProviderTokenUpdates:
                expected = .retry(after: .seconds(5), reason: .providerToken, change: .restorePreviousProviderToken)
            case .tooManyRequests:
                expected = .retry(after: .seconds(1), reason: .tooManyRequests, change: .none)
            case .topicDisallowed:
                expected = .retry(after: .zero, reason: nil, change: .newConnectionForTopic)
            case .invalidProviderToken, .missingProviderToken, .badCertificate, .badCertificateEnvironment,
                 .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken:
                expected = .stop(.providerTokenFault)
            default:
                expected = .stop(.final)
            }
            #expect(action == expected, "\(reason)")
            #expect(machine.attempts == 1, "\(reason): an answer is an attempt")
        }
    }

    @Test func successAndUnknownReasons() {
        var machine = machine()
        #expect(machine.handle(.response(status: 200, reason: nil), nowMilliseconds: Self.now) == .delivered)
        var unknown = self.machine()
        #expect(unknown.handle(.response(status: 500, reason: .unknown("Brand new")), nowMilliseconds: Self.now) == .stop(.final))
        var bare = self.machine()
        #expect(bare.handle(.response(status: 503, reason: nil), nowMilliseconds: Self.now)
            == .retry(after: .milliseconds(100), reason: .serverError(status: 503), change: .none))
        #expect(bare.handle(.response(status: 400, reason: nil), nowMilliseconds: Self.now) == .stop(.final))
    }

    @Test func transientFailuresBackOffExponentiallyUntilTheDeadlineWithoutAnAttemptLimit() {
        var machine = machine(horizon: .seconds(60))
        var now = Self.now
        var delays: [Duration] = []
        let events: [APNsRetryStateMachine.Event] = [.streamTimeout, .connectionLost, .response(status: 500, reason: .internalServerError), .noConnection]
        var index = 0
        while case .retry(let delay, let reason, let change) = machine.handle(events[index % events.count], nowMilliseconds: now) {
            #expect(change == .none)
            #expect(reason != nil)
            delays.append(delay)
            now += delay.wholeMillisecondsForTest
            index += 1
        }
        // 0.1, 0.2, 0.4 … capped at 10 s: well over 5 tries within a minute, none past it.
        #expect(Array(delays.prefix(8)) == [100, 200, 400, 800, 1600, 3200, 6400, 10_000].map { .milliseconds($0) })
        #expect(delays.count > 10)
        #expect(now <= Self.now + 60_000)
        #expect(machine.handle(.streamTimeout, nowMilliseconds: now) == .stop(.retryHorizonExceeded))
        #expect(machine.lastEvent == .streamTimeout)
    }

    @Test func retryReasonsNameTheFailure() {
        var machine = machine()
        #expect(machine.handle(.streamTimeout, nowMilliseconds: Self.now) == .retry(after: .milliseconds(100), reason: .streamTimeout, change: .none))
        #expect(machine.handle(.connectionLost, nowMilliseconds: Self.now) == .retry(after: .milliseconds(200), reason: .connectionFailure, change: .none))
        #expect(machine.handle(.noConnection, nowMilliseconds: Self.now) == .retry(after: .milliseconds(400), reason: .connectionFailure, change: .none))
        #expect(machine.attempts == 2, "a stream that timed out or was lost may have been processed; no connection sent nothing")
    }

    @Test func aDeadlineInThePastAllowsNoRetry() {
        var machine = APNsRetryStateMachine(policy: Self.policy, deadlineMilliseconds: Self.now - 1, random: { 1 })
        #expect(machine.handle(.response(status: 503, reason: .serviceUnavailable), nowMilliseconds: Self.now) == .stop(.retryHorizonExceeded))
        #expect(machine.attempts == 1)
    }

    @Test func streamsAPNsDidNotProcessAreResentAtOnceAndAreNotAttempts() {
        var machine = machine()
        for _ in 0..<3 {
            #expect(machine.handle(.notProcessed, nowMilliseconds: Self.now) == .retry(after: .zero, reason: nil, change: .none))
        }
        #expect(machine.attempts == 0)
        #expect(machine.handle(.notProcessed, nowMilliseconds: Self.now) == .stop(.tooManyUnprocessedResends))
    }

    @Test func expiredProviderTokenIsRetriedOnceThenAProviderFault() {
        var machine = machine()
        let expired = APNsRetryStateMachine.Event.response(status: 403, reason: .expiredProviderToken)
        #expect(machine.handle(expired, nowMilliseconds: Self.now) == .retry(after: .zero, reason: nil, change: .retireAndRenewProviderToken))
        #expect(machine.handle(expired, nowMilliseconds: Self.now) == .stop(.providerTokenFault))
        #expect(machine.attempts == 2, "exactly two sends")
    }

    @Test func shutdownAndIdleTimeoutMoveToANewConnectionThenBackOff() {
        var machine = machine()
        let shutdown = APNsRetryStateMachine.Event.response(status: 503, reason: .shutdown)
        #expect(machine.handle(shutdown, nowMilliseconds: Self.now) == .retry(after: .zero, reason: nil, change: .retire))
        #expect(machine.handle(shutdown, nowMilliseconds: Self.now) == .retry(after: .milliseconds(100), reason: .serverError(status: 503), change: .retire))
    }

    @Test func tooManyRequestsHoldsGrowPerStrike() {
        var machine = machine()
        let throttled = APNsRetryStateMachine.Event.response(status: 429, reason: .tooManyRequests)
        #expect(machine.handle(throttled, nowMilliseconds: Self.now) == .retry(after: .seconds(1), reason: .tooManyRequests, change: .none))
        #expect(machine.handle(throttled, nowMilliseconds: Self.now) == .retry(after: .seconds(2), reason: .tooManyRequests, change: .none))
        #expect(machine.tooManyRequestsStrikes == 2)
        var short = self.machine(horizon: .milliseconds(500))
        #expect(short.handle(throttled, nowMilliseconds: Self.now) == .stop(.retryHorizonExceeded))
    }

    @Test func anOpenCircuitWaitsWithoutSpendingAttempts() {
        var machine = machine(horizon: .seconds(10))
        for _ in 0..<4 {
            #expect(machine.handle(.circuitOpen(wait: .seconds(2)), nowMilliseconds: Self.now) == .retry(after: .seconds(2), reason: .circuitOpen, change: .none))
        }
        #expect(machine.attempts == 0 && machine.failures == 0)
        #expect(machine.handle(.circuitOpen(wait: .seconds(11)), nowMilliseconds: Self.now) == .stop(.retryHorizonExceeded))
        #expect(machine.lastEventWasCircuitOpen)
    }

    @Test func jitterScalesTheDelayBetweenHalfAndAll() {
        var low = APNsRetryStateMachine(policy: Self.policy, deadlineMilliseconds: Self.now + 60_000, random: { 0.5 })
        #expect(low.handle(.streamTimeout, nowMilliseconds: Self.now) == .retry(after: .milliseconds(50), reason: .streamTimeout, change: .none))
        let backoff = Self.policy.backoff
        for failures in 1...20 {
            let delay = backoff.delay(afterFailures: failures)
            #expect(delay >= backoff.delay(afterFailures: failures, random: 0.5) && delay <= backoff.delay(afterFailures: failures, random: 1))
        }
    }
}

/// The retry deadline of a notification (`APNsRetryHorizon`).
@Suite struct RetryHorizonTests {
    @Test func deadlineFollowsApnsExpiration() {
        let horizon = APNsRetryHorizon(immediate: .seconds(30), absent: .seconds(900))
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(horizon.deadline(for: .omitted, now: now) == Date(timeIntervalSince1970: 1_800_000_900))
        #expect(horizon.deadline(for: .immediately, now: now) == Date(timeIntervalSince1970: 1_800_000_030))
        #expect(horizon.deadline(for: .at(secondsSinceEpoch: 1_800_003_600), now: now) == Date(timeIntervalSince1970: 1_800_003_600))
        #expect(horizon.deadline(for: .at(secondsSinceEpoch: 1_799_999_000), now: now) == Date(timeIntervalSince1970: 1_799_999_000))
        #expect(APNsRetryHorizon() == APNsRetryHorizon(immediate: .seconds(30), absent: .seconds(15 * 60)))
    }
}

extension Duration {
    var wholeMillisecondsForTest: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}
