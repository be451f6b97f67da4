import Testing

@testable import DispatcherCore

/// The infrastructure retry's waits and logs, without I/O (docs/dispatcher-engine.md "Failures").
struct InfrastructureRetryTests {
    let settings = InfrastructureRetry.Settings(
        initialDelay: .milliseconds(200), maximumDelay: .seconds(10), jitter: 0.2,
        stuckThreshold: .seconds(60), stuckLogInterval: .seconds(60))

    @Test func stepsDoubleUpToTheCap() {
        var retry = InfrastructureRetry(settings)
        var steps: [Duration] = []
        for _ in 0..<10 {
            _ = retry.failed(at: .now)
            steps.append(retry.step)
        }
        #expect(steps.map(\.wholeMilliseconds) == [200, 400, 800, 1_600, 3_200, 6_400, 10_000, 10_000, 10_000, 10_000])
    }

    @Test func everyWaitLiesWithinTheJitterBoundsOfItsStep() {
        var retry = InfrastructureRetry(settings)
        var system = SystemRandomNumberGenerator()
        var distinct = Set<Int64>()
        for _ in 0..<200 {
            let decision = retry.failed(at: .now, using: &system)
            let step = retry.step
            #expect(decision.delay <= step, "\(decision.delay) above its step \(step)")
            #expect(decision.delay >= step * 0.8, "\(decision.delay) below 0.8 × \(step)")
            distinct.insert(decision.delay.wholeMilliseconds)
        }
        #expect(distinct.count > 10, "the waits are not spread: \(distinct.count) distinct values")
    }

    @Test func withoutJitterTheWaitIsTheStep() {
        var retry = InfrastructureRetry(.init(
            initialDelay: .milliseconds(50), maximumDelay: .milliseconds(120), jitter: 0,
            stuckThreshold: .seconds(60), stuckLogInterval: .seconds(60)))
        let delays = (0..<4).map { _ in retry.failed(at: .now).delay }
        #expect(delays == [.milliseconds(50), .milliseconds(100), .milliseconds(120), .milliseconds(120)])
    }

    @Test func pastTheThresholdTheRecordIsLoggedAsStuckOncePerInterval() {
        var retry = InfrastructureRetry(settings)
        let start = ContinuousClock.now
        var logs: [InfrastructureRetry.Log] = []
        // A failure every 10 s for 3 minutes.
        for second in stride(from: 0, through: 180, by: 10) {
            logs.append(retry.failed(at: start + .seconds(second)).log)
        }
        #expect(Array(logs.prefix(6)) == Array(repeating: .retrying, count: 6))  // 0 ... 50 s
        #expect(logs[6] == .stuck(retryingFor: .seconds(60)))
        #expect(logs[7...11].allSatisfy { $0 == .quiet })  // 70 ... 110 s
        #expect(logs[12] == .stuck(retryingFor: .seconds(120)))
        #expect(logs[18] == .stuck(retryingFor: .seconds(180)))
        #expect(logs.filter { if case .stuck = $0 { true } else { false } }.count == 3)
    }

    @Test func successStartsOver() {
        var retry = InfrastructureRetry(settings)
        let start = ContinuousClock.now
        for second in 0..<70 { _ = retry.failed(at: start + .seconds(second)) }
        #expect(retry.step == .seconds(10))
        retry.succeeded()
        #expect(retry.failures == 0)
        let next = retry.failed(at: start + .seconds(71))
        #expect((159...200).contains(next.delay.wholeMilliseconds), "back to the first step: \(next.delay)")
        #expect(next.log == .retrying, "the stuck clock starts again at the first failure after a success")
    }
}
