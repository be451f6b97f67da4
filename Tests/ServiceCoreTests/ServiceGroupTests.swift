import Foundation
import Synchronization
import Testing
@testable import ServiceCore

/// What a test service went through, readable from the test while the service runs.
final class ServiceProbe: Sendable {
    struct Record {
        var started = false
        var sawTrigger = false
        var wasCancelled = false
        var finishedWork = false
    }

    private let record = Mutex(Record())

    func update(_ body: (inout Record) -> Void) { record.withLock { body(&$0) } }
    var snapshot: Record { record.withLock { $0 } }
}

/// Waits for `condition` with a deadline instead of sleeping and asserting.
func waitFor(
    _ what: String, timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("timed out waiting for \(what)", sourceLocation: sourceLocation)
            throw CancellationError()
        }
        try await Task.sleep(for: .milliseconds(5))
    }
}

/// Takes 200 ms to finish its work in progress once shutdown triggers; records cancellation.
struct DrainingService: Service {
    let probe: ServiceProbe
    var drainTime: Duration = .milliseconds(200)

    func run(shutdown: GracefulShutdown) async throws {
        probe.update { $0.started = true }
        await shutdown.wait()
        guard !Task.isCancelled else {
            probe.update { $0.wasCancelled = true }
            throw CancellationError()
        }
        probe.update { $0.sawTrigger = true }
        do {
            try await Task.sleep(for: drainTime)  // the work in progress
        } catch {
            probe.update { $0.wasCancelled = true }
            throw error
        }
        probe.update { $0.finishedWork = true }
    }
}

/// Ignores graceful shutdown: only cancellation stops it.
struct StubbornService: Service {
    let probe: ServiceProbe

    func run(shutdown: GracefulShutdown) async throws {
        let probe = self.probe
        shutdown.onTrigger { probe.update { $0.sawTrigger = true } }
        probe.update { $0.started = true }
        do {
            try await Task.sleep(for: .seconds(120))
        } catch {
            probe.update { $0.wasCancelled = true }
            throw error
        }
    }
}

struct FailingService: Service {
    struct Boom: Error, Equatable {}
    let probe: ServiceProbe

    func run(shutdown: GracefulShutdown) async throws {
        probe.update { $0.started = true }
        throw Boom()
    }
}

struct ReturningService: Service {
    func run(shutdown: GracefulShutdown) async throws {}
}

/// Runs groups, some of them on real signals sent to this test process: one at a time.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct ServiceGroupTests {
    let logger = Logger(label: "service-group-test", logLevel: .warning)

    @Test func aServiceThatNeedsTimeToFinishIsNotCancelled() async throws {
        let probe = ServiceProbe()
        let group = ServiceGroup(
            services: [DrainingService(probe: probe)], configuration: .init(signals: [], gracePeriod: .seconds(20)), logger: logger)
        let run = Task { try await group.run() }
        try await waitFor("the service to start") { probe.snapshot.started }
        let started = ContinuousClock.now
        group.triggerGracefulShutdown()
        let outcome = try await run.value
        #expect(outcome == .graceful)
        #expect(ContinuousClock.now - started >= .milliseconds(200))
        let record = probe.snapshot
        #expect(record.sawTrigger && record.finishedWork && !record.wasCancelled)
    }

    @Test func theGracePeriodEscalatesToCancellation() async throws {
        let stubborn = ServiceProbe()
        let draining = ServiceProbe()
        let group = ServiceGroup(
            services: [StubbornService(probe: stubborn), DrainingService(probe: draining, drainTime: .milliseconds(50))],
            configuration: .init(signals: [], gracePeriod: .milliseconds(300)), logger: logger)
        let run = Task { try await group.run() }
        try await waitFor("the services to start") { stubborn.snapshot.started && draining.snapshot.started }
        let started = ContinuousClock.now
        group.triggerGracefulShutdown()
        let outcome = try await run.value
        #expect(outcome == .escalatedAfterGracePeriod)
        #expect(!outcome.isGraceful)
        #expect(ContinuousClock.now - started >= .milliseconds(300))
        #expect(stubborn.snapshot.sawTrigger && stubborn.snapshot.wasCancelled)
        // The quick one had finished within the grace period: never cancelled.
        #expect(draining.snapshot.finishedWork && !draining.snapshot.wasCancelled)
    }

    @Test func theFirstSignalShutsDownGracefully() async throws {
        let probe = ServiceProbe()
        let group = ServiceGroup(
            services: [DrainingService(probe: probe)], configuration: .init(signals: [SIGUSR2], gracePeriod: .seconds(20)), logger: logger)
        let run = Task { try await group.run() }
        try await waitFor("the service to start") { probe.snapshot.started }
        kill(getpid(), SIGUSR2)
        #expect(try await run.value == .graceful)
        #expect(probe.snapshot.finishedWork && !probe.snapshot.wasCancelled)
    }

    @Test func aSecondSignalEscalatesAtOnce() async throws {
        let probe = ServiceProbe()
        let group = ServiceGroup(
            services: [StubbornService(probe: probe)], configuration: .init(signals: [SIGUSR2], gracePeriod: .seconds(60)), logger: logger)
        let run = Task { try await group.run() }
        try await waitFor("the service to start") { probe.snapshot.started }
        kill(getpid(), SIGUSR2)
        try await waitFor("graceful shutdown to reach the service") { probe.snapshot.sawTrigger }
        #expect(!probe.snapshot.wasCancelled)
        let second = ContinuousClock.now
        kill(getpid(), SIGUSR2)
        #expect(try await run.value == .escalatedBySignal(SIGUSR2))
        #expect(ContinuousClock.now - second < .seconds(30))  // far below the 60 s grace period
        #expect(probe.snapshot.wasCancelled)
    }

    @Test func aThrowingServiceShutsDownTheOthersGracefullyAndRunRethrows() async throws {
        let failing = ServiceProbe()
        let draining = ServiceProbe()
        let group = ServiceGroup(
            services: [DrainingService(probe: draining), FailingService(probe: failing)],
            configuration: .init(signals: [], gracePeriod: .seconds(20)), logger: logger)
        await #expect(throws: FailingService.Boom()) { try await group.run() }
        #expect(failing.snapshot.started)
        let record = draining.snapshot
        #expect(record.sawTrigger && record.finishedWork && !record.wasCancelled)
    }

    @Test func aServiceReturningOnItsOwnShutsDownTheOthers() async throws {
        let probe = ServiceProbe()
        let group = ServiceGroup(
            services: [ReturningService(), DrainingService(probe: probe, drainTime: .milliseconds(10))],
            configuration: .init(signals: [], gracePeriod: .seconds(20)), logger: logger)
        #expect(try await group.run() == .graceful)
        #expect(probe.snapshot.sawTrigger && !probe.snapshot.wasCancelled)
    }

    @Test func cancellingRunCancelsTheServices() async throws {
        let probe = ServiceProbe()
        let group = ServiceGroup(
            services: [StubbornService(probe: probe)], configuration: .init(signals: [], gracePeriod: .seconds(60)), logger: logger)
        let run = Task { try await group.run() }
        try await waitFor("the service to start") { probe.snapshot.started }
        run.cancel()
        #expect(try await run.value == .cancelled)
        #expect(probe.snapshot.wasCancelled)
    }

    @Test func signalStreamsDeliverEveryOccurrenceToEverySubscriber() async throws {
        let first = ProcessSignals.signals([SIGUSR1])
        let second = ProcessSignals.signals([SIGUSR1, SIGUSR2])
        let counts = SignalCounts()
        let readers = Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { for await _ in first { if counts.count(\.first) == 3 { break } } }
                group.addTask { for await _ in second { if counts.count(\.second) == 3 { break } } }
            }
        }
        for _ in 0..<3 {
            let before = counts.snapshot
            kill(getpid(), SIGUSR1)
            // One at a time, so that the kernel cannot merge them (merged ones are counted too).
            try await waitFor("the signal to arrive") { counts.snapshot.first > before.first && counts.snapshot.second > before.second }
        }
        await readers.value
        let final = counts.snapshot
        #expect(final.first == 3 && final.second == 3)
    }
}

/// Occurrences seen by two signal subscribers.
final class SignalCounts: Sendable {
    struct Counts {
        var first = 0
        var second = 0
    }

    private let counts = Mutex(Counts())

    /// Adds one to the counter at `path` and returns its new value.
    func count(_ path: WritableKeyPath<Counts, Int> & Sendable) -> Int {
        counts.withLock { $0[keyPath: path] += 1; return $0[keyPath: path] }
    }

    var snapshot: Counts { counts.withLock { $0 } }
}

@Suite struct GracefulShutdownTests {
    @Test func handlersRunOnceAndLateOnesAtOnce() {
        let shutdown = GracefulShutdown()
        let calls = Mutex(0)
        shutdown.onTrigger { calls.withLock { $0 += 1 } }
        let removed = shutdown.onTrigger { calls.withLock { $0 += 100 } }
        #expect(shutdown.removeHandler(removed))
        #expect(!shutdown.isTriggered)
        shutdown.trigger()
        shutdown.trigger()
        #expect(shutdown.isTriggered)
        #expect(calls.withLock { $0 } == 1)
        shutdown.onTrigger { calls.withLock { $0 += 10 } }
        #expect(calls.withLock { $0 } == 11)
    }

    @Test func waitReturnsOnTriggerAndOnCancellation() async throws {
        let shutdown = GracefulShutdown()
        let waiter = Task { await shutdown.wait(); return Task.isCancelled }
        let cancelled = Task { await shutdown.wait(); return Task.isCancelled }
        cancelled.cancel()
        #expect(await cancelled.value)
        #expect(!shutdown.isTriggered)
        shutdown.trigger()
        #expect(await waiter.value == false)
        await shutdown.wait()  // already triggered: returns at once
    }
}
