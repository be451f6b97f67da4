import PushTestSupport
import ServiceCore
import Synchronization
import Testing

@testable import DispatcherCore

/// `Batcher` with real tasks: its flush loop, the bound on batches at once, graceful stop and
/// cancellation. The decisions themselves are `BatchQueueTests`'.
@Suite(.timeLimit(.minutes(1)))
struct BatcherTests {
    /// Counts the batches running at once and the largest batch.
    final class Probe: Sendable {
        struct State {
            var running = 0
            var mostRunning = 0
            var sizes: [Int] = []
        }
        let state = Mutex(State())

        func batch(_ inputs: [Int]) async throws -> [Int] {
            state.withLock {
                $0.running += 1
                $0.mostRunning = max($0.mostRunning, $0.running)
                $0.sizes.append(inputs.count)
            }
            try? await Task.sleep(for: .milliseconds(20))
            state.withLock { $0.running -= 1 }
            return inputs.map { $0 * 2 }
        }
    }

    @Test func manyCallersShareFewBatchesAndEachGetsItsOwnOutput() async throws {
        let probe = Probe()
        let batcher = Batcher<Int, Int>(name: "test", settings: .init(maxBatch: 50, maxConcurrentBatches: 2)) { try await probe.batch($0) }
        let outputs = try await whileRunning(batcher) {
            try await withThrowingTaskGroup(of: (Int, Int).self) { group in
                for i in 0..<1_000 { group.addTask { (i, try await batcher.submit(i)) } }
                return try await group.reduce(into: [Int: Int]()) { $0[$1.0] = $1.1 }
            }
        }
        #expect(outputs.count == 1_000 && outputs.allSatisfy { $0.value == $0.key * 2 })
        let state = probe.state.withLock { $0 }
        #expect(state.mostRunning <= 2, "at most 2 batches at once, saw \(state.mostRunning)")
        #expect(state.sizes.allSatisfy { $0 <= 50 })
        #expect(state.sizes.count < 100, "1,000 callers took \(state.sizes.count) batches: they did not gather")
    }

    @Test func gracefulStopRunsWhatWaitsThenRefusesNewItems() async throws {
        let probe = Probe()
        // An hour's wait: only the stop can send this lone item.
        let batcher = Batcher<Int, Int>(name: "test", settings: .init(maxBatch: 10, maxWait: .seconds(3600))) { try await probe.batch($0) }
        let shutdown = GracefulShutdown()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run(shutdown: shutdown) }
            group.addTask {
                let output = try await batcher.submit(21)
                #expect(output == 42)
            }
            _ = try await CampaignStoreTests.eventually("the item waits in the batcher") { probe.state.withLock { $0.sizes.isEmpty } && batcher.hasWaiting ? true : nil }
            shutdown.trigger()
            try await group.waitForAll()
        }
        await #expect(throws: Batcher<Int, Int>.Stopped.self) { try await batcher.submit(1) }
    }

    /// Synchronous code (the consumer's poll thread taking a cancel) queues an item without a task:
    /// it runs with the next batch, with the items callers wait for; after a stop it is refused.
    @Test func anEnqueuedItemRunsWithoutACallerWaitingAndIsRefusedAfterTheStop() async throws {
        let probe = Probe()
        let batcher = Batcher<Int, Int>(name: "test", settings: .init(maxBatch: 10)) { try await probe.batch($0) }
        let shutdown = GracefulShutdown()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run(shutdown: shutdown) }
            #expect(batcher.enqueue(1))
            #expect(try await batcher.submit(2) == 4)
            try await eventually("the enqueued item ran") { probe.state.withLock { $0.sizes.reduce(0, +) } == 2 }
            shutdown.trigger()
            try await group.waitForAll()
        }
        #expect(!batcher.enqueue(3))
    }

    /// `enqueue(_:whenRun:)` (how a report's place in `SendLogWriter`'s unmarked window is given back):
    /// `done` is called once its batch ran, whether `execute` returned or threw, and once for an item a
    /// cancelled batcher abandoned; never before the batch ran.
    @Test func anEnqueuedItemsDoneRunsOnceAfterItsBatchWhateverTheBatchDid() async throws {
        let calls = Mutex<[Int]>([])
        let executed = Mutex<Set<Int>>([])
        let failing = Batcher<Int, Int>(name: "test", settings: .init(maxBatch: 10)) { inputs in
            executed.withLock { $0.formUnion(inputs) }
            if inputs.contains(2) { throw TestFailure("batch of \(inputs) failed") }
            return inputs
        }
        try await whileRunning(failing) {
            for item in [1, 2] {
                // Negative: `done` ran before its batch did.
                #expect(failing.enqueue(item) { calls.withLock { $0.append(executed.withLock { $0.contains(item) } ? item : -item) } })
                try await eventually("item \(item)'s done ran") { calls.withLock { $0.contains { abs($0) == item } } }
            }
        }
        #expect(calls.withLock { $0 } == [1, 2], "one call each after its batch ran, the failed batch's too")

        let waiting = Batcher<Int, Int>(name: "test", settings: .init(maxWait: .seconds(3600))) { $0 }
        let runner = Task { try await waiting.run(shutdown: GracefulShutdown()) }
        #expect(waiting.enqueue(3) { calls.withLock { $0.append(-3) } })
        _ = try await CampaignStoreTests.eventually("the item waits in the batcher") { waiting.hasWaiting ? true : nil }
        #expect(calls.withLock { $0 } == [1, 2])
        runner.cancel()
        _ = await runner.result
        #expect(calls.withLock { $0 } == [1, 2, -3], "the abandoned item's done ran (its batch never did)")
    }

    /// A labelled batcher's batches are timed in the dispatcher's metrics: items per batch, how long
    /// each batch's first item waited (here behind the one running batch), how long each ran.
    @Test func aLabelledBatchersBatchesAreCountedAndTimed() async throws {
        let sizes = Mutex<[Int]>([])
        let label = "test_timing"
        func sample(_ name: String) -> Double {
            let prefix = "\(name){batcher=\"\(label)\"} "
            let line = MetricsRegistry.shared.render().split(separator: "\n").first { $0.hasPrefix(prefix) }
            return line.flatMap { Double($0.dropFirst(prefix.count)) } ?? 0
        }
        let before = (batches: sample("push_batch_items_count"), items: sample("push_batch_items_sum"),
                      wait: sample("push_batch_wait_seconds_sum"), ran: sample("push_batch_duration_seconds_sum"))
        // Each batch runs 300 ms: long enough for the five callers below to gather behind the first
        // however slowly a loaded machine schedules them.
        let batcher = Batcher<Int, Int>(name: "test", metricLabel: label, settings: .init(maxBatch: 10)) { inputs in
            sizes.withLock { $0.append(inputs.count) }
            try? await Task.sleep(for: .milliseconds(300))
            return inputs
        }
        try await whileRunning(batcher) {
            async let first = batcher.submit(1)
            _ = try await CampaignStoreTests.eventually("the first batch runs") { sizes.withLock { $0.count == 1 } ? true : nil }
            // The only slot is busy: these five gather into the second batch.
            try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 2...6 { group.addTask { try await batcher.submit(i) } }
                try await group.waitForAll()
            }
            _ = try await first
        }
        #expect(sizes.withLock { $0 } == [1, 5])
        #expect(sample("push_batch_items_count") - before.batches == 2)
        #expect(sample("push_batch_items_sum") - before.items == 6)
        let ran = sample("push_batch_duration_seconds_sum") - before.ran
        #expect(ran >= 0.6, "two batches of at least 300 ms each ran \(ran) s")
        let waited = sample("push_batch_wait_seconds_sum") - before.wait
        #expect(waited >= 0.1, "the second batch's first item waited behind the first batch: \(waited) s")
    }

    @Test func cancellationFailsTheWaitingCallers() async throws {
        let batcher = Batcher<Int, Int>(name: "test", settings: .init(maxWait: .seconds(3600))) { $0 }
        let runner = Task { try await batcher.run(shutdown: GracefulShutdown()) }
        let caller = Task { try await batcher.submit(1) }
        _ = try await CampaignStoreTests.eventually("the item waits in the batcher") { batcher.hasWaiting ? true : nil }
        runner.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        _ = await runner.result
    }
}
