import Synchronization

/// Gathers look-ups from many concurrent callers into batches ("natural batching"): a look-up starts a
/// batch at once when fewer than `maxConcurrentBatches` are running; otherwise it waits with the
/// others and they go together as soon as a batch finishes. No timer adds latency when the load is
/// low, and under load one query serves up to `maxBatch` callers.
final class BatchLoader<Input: Sendable, Output: Sendable>: Sendable {
    typealias Load = @Sendable ([Input]) async throws -> [Output]

    private struct Waiter {
        var input: Input
        var continuation: CheckedContinuation<Output, any Error>
    }

    private struct State {
        var waiting: [Waiter] = []
        var running = 0
    }

    private let state = Mutex(State())
    private let maxBatch: Int
    private let maxConcurrentBatches: Int
    private let loadBatch: Load

    /// - Parameters:
    ///   - maxBatch: most inputs in one call of `load`.
    ///   - maxConcurrentBatches: calls of `load` running at once.
    ///   - load: answers a batch; its result has one output per input, in the same order.
    init(maxBatch: Int = 500, maxConcurrentBatches: Int = 4, load: @escaping Load) {
        self.maxBatch = max(1, maxBatch)
        self.maxConcurrentBatches = max(1, maxConcurrentBatches)
        self.loadBatch = load
    }

    /// The output for `input`, loaded together with whatever other look-ups are waiting.
    /// - Throws: the error of the batch's `load`. A cancelled caller still gets its batch's answer.
    func load(_ input: Input) async throws -> Output {
        try await withCheckedThrowingContinuation { continuation in
            let batch = state.withLock { state -> [Waiter]? in
                state.waiting.append(Waiter(input: input, continuation: continuation))
                return takeBatch(&state)
            }
            if let batch { start(batch) }
        }
    }

    private func takeBatch(_ state: inout State) -> [Waiter]? {
        guard state.running < maxConcurrentBatches, !state.waiting.isEmpty else { return nil }
        state.running += 1
        let count = min(maxBatch, state.waiting.count)
        let batch = Array(state.waiting.prefix(count))
        state.waiting.removeFirst(count)
        return batch
    }

    private func start(_ batch: [Waiter]) {
        Task {
            do {
                let outputs = try await loadBatch(batch.map(\.input))
                precondition(outputs.count == batch.count, "BatchLoader: load returned \(outputs.count) outputs for \(batch.count) inputs")
                for (waiter, output) in zip(batch, outputs) { waiter.continuation.resume(returning: output) }
            } catch {
                for waiter in batch { waiter.continuation.resume(throwing: error) }
            }
            let next = state.withLock { state -> [Waiter]? in
                state.running -= 1
                return takeBatch(&state)
            }
            if let next { start(next) }
        }
    }
}
