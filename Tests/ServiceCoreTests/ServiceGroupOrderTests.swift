import Foundation
import Synchronization
import Testing
@testable import ServiceCore

/// What services of a tree of groups did, in the order they did it.
final class Timeline: Sendable {
    private let entries = Mutex<[String]>([])

    func note(_ entry: String) { entries.withLock { $0.append(entry) } }
    var snapshot: [String] { entries.withLock { $0 } }

    /// Position of `entry` in the timeline (`Int.max` when absent).
    func position(_ entry: String) -> Int { snapshot.firstIndex(of: entry) ?? .max }
}

/// Notes `started`, `asked` (its trigger fired), `finished` or `cancelled`; takes `drainTime` to stop.
struct TimedService: Service {
    let name: String
    let drainTime: Duration
    let timeline: Timeline

    func run(shutdown: GracefulShutdown) async throws {
        timeline.note("\(name) started")
        await shutdown.wait()
        guard !Task.isCancelled else {
            timeline.note("\(name) cancelled")
            throw CancellationError()
        }
        timeline.note("\(name) asked")
        do {
            try await Task.sleep(for: drainTime)
        } catch {
            timeline.note("\(name) cancelled")
            throw error
        }
        timeline.note("\(name) finished")
    }
}

/// The dispatcher's shape with real tasks: infrastructure in reverse start order around a nested
/// group of sources that stop at once, all under the outermost group's grace period.
@Suite(.timeLimit(.minutes(1)))
struct ServiceGroupOrderTests {
    let logger = Logger(label: "service-group-order-test", logLevel: .warning)

    /// pool, producer, sources[engine, campaigns, parked]: drains of 600 ms for each source and
    /// 100 ms for each piece of infrastructure.
    func tree(_ timeline: Timeline, sourceDrain: Duration = .milliseconds(600), producerDrain: Duration = .milliseconds(100),
              gracePeriod: Duration) -> ServiceGroup {
        let sources = ServiceGroup(
            services: ["engine", "campaigns", "parked"].map { TimedService(name: $0, drainTime: sourceDrain, timeline: timeline) },
            configuration: .nested(shutdownOrder: .concurrent), logger: logger)
        return ServiceGroup(
            services: [
                TimedService(name: "pool", drainTime: .milliseconds(100), timeline: timeline),
                TimedService(name: "producer", drainTime: producerDrain, timeline: timeline),
                sources,
            ],
            configuration: .init(signals: [], gracePeriod: gracePeriod, shutdownOrder: .reverseStartOrder), logger: logger)
    }

    @Test func sourcesStopTogetherThenInfrastructureInReverseStartOrderWithinOneGracePeriod() async throws {
        let timeline = Timeline()
        // Serial drains would take 3 × 600 + 2 × 100 = 2,000 ms, past the 1,500 ms grace period;
        // the sources' drains overlap, so the whole takes about 800 ms.
        let group = tree(timeline, gracePeriod: .milliseconds(1_500))
        let run = Task { try await group.run() }
        try await waitFor("every service to start") { timeline.snapshot.count == 5 }
        let began = ContinuousClock.now
        group.triggerGracefulShutdown()
        #expect(try await run.value == .graceful)
        let took = ContinuousClock.now - began
        let sources = ["engine", "campaigns", "parked"]
        // Concurrent: every source was asked before any of them finished.
        let lastAsked = sources.map { timeline.position("\($0) asked") }.max()!
        let firstFinished = sources.map { timeline.position("\($0) finished") }.min()!
        #expect(lastAsked < firstFinished, "\(timeline.snapshot)")
        // Then the infrastructure, last started first, each after the one before finished.
        let lastSourceFinished = sources.map { timeline.position("\($0) finished") }.max()!
        #expect(lastSourceFinished < timeline.position("producer asked"), "\(timeline.snapshot)")
        #expect(timeline.position("producer finished") < timeline.position("pool asked"), "\(timeline.snapshot)")
        #expect(timeline.position("pool finished") < .max)
        #expect(!timeline.snapshot.contains { $0.hasSuffix("cancelled") }, "\(timeline.snapshot)")
        #expect(took >= .milliseconds(800) && took < .milliseconds(1_500), "took \(took)")
    }

    @Test func theOutermostGracePeriodBoundsEveryLevelAndCancelsThoseNotYetAsked() async throws {
        let timeline = Timeline()
        // The producer's drain (30 s) would outlast the grace period: everyone left is cancelled at
        // 700 ms, the pool too although it was never asked; no level adds a grace period of its own.
        let group = tree(timeline, sourceDrain: .milliseconds(200), producerDrain: .seconds(30), gracePeriod: .milliseconds(700))
        let run = Task { try await group.run() }
        try await waitFor("every service to start") { timeline.snapshot.count == 5 }
        let began = ContinuousClock.now
        group.triggerGracefulShutdown()
        #expect(try await run.value == .escalatedAfterGracePeriod)
        let took = ContinuousClock.now - began
        #expect(took >= .milliseconds(700) && took < .seconds(5), "took \(took)")
        for source in ["engine", "campaigns", "parked"] { #expect(timeline.position("\(source) finished") < .max) }
        #expect(timeline.position("producer cancelled") < .max, "\(timeline.snapshot)")
        #expect(timeline.position("pool asked") == .max && timeline.position("pool cancelled") < .max, "\(timeline.snapshot)")
    }

    @Test func cancellingTheOutermostGroupCancelsNestedServices() async throws {
        let timeline = Timeline()
        let group = tree(timeline, gracePeriod: .seconds(30))
        let run = Task { try await group.run() }
        try await waitFor("every service to start") { timeline.snapshot.count == 5 }
        run.cancel()
        #expect(try await run.value == .cancelled)
        for name in ["engine", "campaigns", "parked", "producer", "pool"] {
            #expect(timeline.position("\(name) cancelled") < .max, "\(timeline.snapshot)")
        }
    }

    @Test func aFailureInANestedGroupEndsTheTreeGracefullyAndIsRethrown() async throws {
        let timeline = Timeline()
        let probe = ServiceProbe()
        let sources = ServiceGroup(
            services: [TimedService(name: "engine", drainTime: .milliseconds(50), timeline: timeline), FailingService(probe: probe)],
            configuration: .nested(shutdownOrder: .concurrent), logger: logger)
        let group = ServiceGroup(
            services: [TimedService(name: "pool", drainTime: .milliseconds(50), timeline: timeline), sources],
            configuration: .init(signals: [], gracePeriod: .seconds(30), shutdownOrder: .reverseStartOrder), logger: logger)
        await #expect(throws: FailingService.Boom()) { try await group.run() }
        #expect(timeline.position("engine finished") < timeline.position("pool asked"), "\(timeline.snapshot)")
        #expect(timeline.position("pool finished") < .max)
    }

    @Test func sleepEndsEarlyOnTheTriggerAndThrowsOnCancellation() async throws {
        let shutdown = GracefulShutdown()
        let sleeper = Task { () -> Duration in
            let start = ContinuousClock.now
            try await shutdown.sleep(for: .seconds(30))
            return ContinuousClock.now - start
        }
        shutdown.trigger()
        #expect(try await sleeper.value < .seconds(10))
        let cancelled = Task { try await GracefulShutdown().sleep(for: .seconds(30)) }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
    }
}
