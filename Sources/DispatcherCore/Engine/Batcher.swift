import ServiceCore
import Synchronization

/// Gathers the items of many concurrent callers into batches and runs each batch with one call of
/// `execute` (one statement for many rows or look-ups). The decisions are `BatchQueue`'s: a batch goes
/// when a slot is free and it is full, its oldest item waited `maxWait`, or `maxWait` is zero
/// ("natural batching": items gather only while every slot is busy).
///
/// One long-lived flush loop per batcher, its `run(shutdown:)` (a `Service`); the batches run as
/// child tasks of that loop. Graceful shutdown: what waits is run at once, running batches finish,
/// then `run` returns; later submissions throw `Batcher.Stopped`. Cancellation: waiting callers get
/// `CancellationError`, running batches are cancelled (their callers get what `execute` throws).
public final class Batcher<Input: Sendable, Output: Sendable>: Service, Sendable {
    /// Runs one batch: one output per input, in the same order.
    public typealias Execute = @Sendable ([Input]) async throws -> [Output]

    /// The shape of the batches.
    public struct Settings: Sendable {
        /// Most items in one call of `execute` (at least 1).
        public var maxBatch: Int
        /// Calls of `execute` running at once (at least 1). Default 1: while a statement runs, the
        /// next batch gathers. At a moderate rate, more slots sent each look-up alone, and those
        /// small statements and their wake-ups cost enough CPU to raise the latency they were to
        /// save (docs/dispatcher-engine.md "Batched I/O").
        public var maxConcurrentBatches: Int
        /// The longest an item waits for its batch to fill while a slot is free; zero: never.
        public var maxWait: Duration

        public init(maxBatch: Int = 500, maxConcurrentBatches: Int = 1, maxWait: Duration = .zero) {
            self.maxBatch = maxBatch
            self.maxConcurrentBatches = maxConcurrentBatches
            self.maxWait = maxWait
        }
    }

    /// A submission after the batcher stopped (or before it ran, once stopped).
    public struct Stopped: Error, CustomStringConvertible {
        public let name: String
        public var description: String { "the \(name) batcher has stopped" }
    }

    private struct Entry {
        var input: Input
        /// Nil for an item queued without a caller waiting (`enqueue`).
        var continuation: CheckedContinuation<Output, any Error>?
        /// For an item queued by `enqueue(_:whenRun:)`: called once its batch ran (or was abandoned).
        var done: (@Sendable () -> Void)? = nil
    }

    private struct State {
        var queue: BatchQueue<Entry>
        /// The flush loop, suspended until woken.
        var loop: CheckedContinuation<Void, Never>?
        /// Woken while it was not suspended: its next wait returns at once.
        var woken = false
        /// The instant a timer child is armed for (one at a time).
        var timerArmedFor: ContinuousClock.Instant?
        var finished = false
    }

    /// For logs and errors: what the batches do ("send_log", "request fingerprints", …).
    public let name: String
    /// The `batcher` label of its batches' timing (`push_batch_wait_seconds`,
    /// `push_batch_duration_seconds`, `push_batch_items`); nil: not observed.
    public let metricLabel: String?
    public let settings: Settings
    private let execute: Execute
    private let state: Mutex<State>

    /// - Parameters:
    ///   - name: what the batches do, for errors.
    ///   - metricLabel: the `batcher` label of its batches' timing in the dispatcher's metrics (a
    ///     short fixed name, README "Metrics"); nil: not observed.
    ///   - settings: the shape of the batches.
    ///   - execute: runs one batch; its result has one output per input, in the same order. What it
    ///     throws reaches every caller of the batch.
    public init(name: String, metricLabel: String? = nil, settings: Settings = Settings(), execute: @escaping Execute) {
        self.name = name
        self.metricLabel = metricLabel
        self.settings = settings
        self.execute = execute
        self.state = Mutex(State(queue: BatchQueue(
            maxBatch: settings.maxBatch, maxConcurrentBatches: settings.maxConcurrentBatches, maxWait: settings.maxWait)))
    }

    /// Whether items wait for a batch (for tests).
    var hasWaiting: Bool { state.withLock { !$0.queue.waiting.isEmpty } }

    /// The output for `input`, computed with whatever else is submitted meanwhile.
    /// - Throws: what the batch's `execute` threw; `Batcher.Stopped` after the batcher stopped;
    ///   `CancellationError` when the batcher was cancelled before the batch ran. Cancelling the caller
    ///   does not withdraw the item: it still runs with its batch.
    public func submit(_ input: Input) async throws -> Output {
        try await withCheckedThrowingContinuation { continuation in
            let (accepted, wake) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
                guard !state.finished else { return (false, nil) }
                guard state.queue.submitted(Entry(input: input, continuation: continuation), at: .now) else { return (true, nil) }
                return (true, Self.takeLoop(&state))
            }
            guard accepted else {
                continuation.resume(throwing: Stopped(name: name))
                return
            }
            wake?.resume()
        }
    }

    /// Queues `input` without waiting for its output (from synchronous code, e.g. a C callback's
    /// thread): it runs with the next batch; its output, or what the batch throws, is dropped.
    /// - Parameter done: called once, after the batch holding `input` ran (whether `execute` returned
    ///   or threw) or was abandoned by a cancelled batcher; not called when nothing was queued.
    /// - Returns: false when the batcher has stopped (nothing queued).
    public func enqueue(_ input: Input, whenRun done: (@Sendable () -> Void)? = nil) -> Bool {
        let (accepted, wake) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            guard !state.finished else { return (false, nil) }
            guard state.queue.submitted(Entry(input: input, continuation: nil, done: done), at: .now) else { return (true, nil) }
            return (true, Self.takeLoop(&state))
        }
        wake?.resume()
        return accepted
    }

    /// The flush loop; returns after a graceful shutdown once every submitted item ran.
    public func run(shutdown: GracefulShutdown) async throws {
        await withDiscardingTaskGroup { group in
            group.addTask { [self] in
                await shutdown.wait()
                let loop = state.withLock { state -> CheckedContinuation<Void, Never>? in
                    state.queue.stop()
                    return Self.takeLoop(&state)
                }
                loop?.resume()
            }
            while !Task.isCancelled {
                let (step, armTimer) = state.withLock { state -> (BatchQueue<Entry>.Step, Bool) in
                    let step = state.queue.next(at: .now)
                    if case .finished = step { state.finished = true }
                    guard case .sleep(let deadline) = step, state.timerArmedFor.map({ $0 > deadline }) ?? true else { return (step, false) }
                    state.timerArmedFor = deadline
                    return (step, true)
                }
                switch step {
                case .execute(let batch, let oldestArrival):
                    group.addTask { [self] in await runBatch(batch, oldestArrival: oldestArrival) }
                case .sleep(let deadline):
                    if armTimer {
                        group.addTask { [self] in
                            try? await Task.sleep(until: deadline)
                            let loop = state.withLock { state -> CheckedContinuation<Void, Never>? in
                                if state.timerArmedFor == deadline { state.timerArmedFor = nil }
                                return Self.takeLoop(&state)
                            }
                            loop?.resume()
                        }
                    }
                    await waitToBeWoken()
                case .idle:
                    await waitToBeWoken()
                case .finished:
                    group.cancelAll()  // the shutdown watcher has returned; a stale timer need not run out
                    return
                }
            }
            // Cancelled: nobody will run what waits.
            let abandoned = state.withLock { state -> [Entry] in
                state.finished = true
                return state.queue.abandonWaiting()
            }
            for entry in abandoned {
                entry.continuation?.resume(throwing: CancellationError())
                entry.done?()
            }
        }
    }

    private func runBatch(_ batch: [Entry], oldestArrival: ContinuousClock.Instant) async {
        let started = ContinuousClock.now
        let result: Result<[Output], any Error>
        do {
            result = .success(try await execute(batch.map(\.input)))
        } catch {
            result = .failure(error)
        }
        if let metricLabel {
            DispatcherMetrics.shared.observeBatch(metricLabel, items: batch.count, wait: started - oldestArrival, ran: .now - started)
        }
        switch result {
        case .success(let outputs):
            precondition(outputs.count == batch.count, "Batcher \(name): execute returned \(outputs.count) outputs for \(batch.count) inputs")
            // By index, not `for entry in batch`: a loop variable is a copy of the entry (its input
            // retained and released once more per row, a profile's 2 % of a request's CPU).
            for index in batch.indices { batch[index].continuation?.resume(returning: outputs[index]) }
        case .failure(let error):
            for index in batch.indices { batch[index].continuation?.resume(throwing: error) }
        }
        for index in batch.indices { batch[index].done?() }
        let loop = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.queue.batchFinished()
            return Self.takeLoop(&state)
        }
        loop?.resume()
    }

    /// The suspended flush loop to resume, or notes the wake-up for its next wait.
    private static func takeLoop(_ state: inout State) -> CheckedContinuation<Void, Never>? {
        guard let loop = state.loop else {
            state.woken = true
            return nil
        }
        state.loop = nil
        return loop
    }

    /// Suspends the flush loop until something changed (an item, a finished batch, a timer, the
    /// shutdown) or the loop is cancelled.
    private func waitToBeWoken() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.woken || Task.isCancelled {
                        state.woken = false
                        return true
                    }
                    state.loop = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let loop = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.loop = nil }
                return state.loop
            }
            loop?.resume()
        }
    }
}
