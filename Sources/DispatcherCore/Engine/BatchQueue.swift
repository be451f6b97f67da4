/// The batching decisions of a `Batcher`, without I/O: items come in, batches finish, and the flush
/// loop asks what to do next.
///
/// A batch is taken when a slot is free (fewer than `maxConcurrentBatches` running) and one of: it is
/// full (`maxBatch` items), its oldest item has waited `maxWait`, `maxWait` is zero, or the batcher is
/// stopping. While every slot is busy, items gather ("natural batching"): under load one call serves
/// many callers, and with `maxWait` zero no timer adds latency when the load is low.
struct BatchQueue<Item> {
    /// What the flush loop does next.
    enum Step {
        /// Run these items as one batch (a slot is now taken: call `batchFinished()` after); the
        /// first of them arrived at `oldestArrival`.
        case execute([Item], oldestArrival: ContinuousClock.Instant)
        /// Nothing is due before this instant (the oldest item's `maxWait`); sleep until then unless woken.
        case sleep(until: ContinuousClock.Instant)
        /// Nothing to do until woken: no item waits, or every slot is busy.
        case idle
        /// Stopping, nothing waits and nothing runs: the loop ends.
        case finished
    }

    let maxBatch: Int
    let maxConcurrentBatches: Int
    let maxWait: Duration
    private(set) var waiting: [Item] = []
    /// When each waiting item arrived, in the same order.
    private var arrivals: [ContinuousClock.Instant] = []
    /// Batches taken and not finished.
    private(set) var running = 0
    private(set) var stopping = false

    /// - Parameters: see `Batcher.Settings` (values below 1 count as 1; a negative wait as zero).
    init(maxBatch: Int, maxConcurrentBatches: Int, maxWait: Duration) {
        self.maxBatch = max(1, maxBatch)
        self.maxConcurrentBatches = max(1, maxConcurrentBatches)
        self.maxWait = max(maxWait, .zero)
    }

    /// Queues `item`, arrived at `now`.
    /// - Returns: whether the flush loop must be woken for it: the first item (the loop may be idle)
    ///   and the one that fills a batch (the loop may be sleeping out the wait).
    mutating func submitted(_ item: Item, at now: ContinuousClock.Instant) -> Bool {
        waiting.append(item)
        arrivals.append(now)
        return waiting.count == 1 || waiting.count == maxBatch
    }

    /// The next step of the flush loop at `now`.
    mutating func next(at now: ContinuousClock.Instant) -> Step {
        guard !waiting.isEmpty else { return stopping && running == 0 ? .finished : .idle }
        guard running < maxConcurrentBatches else { return .idle }
        let due = arrivals[0] + maxWait
        guard waiting.count >= maxBatch || stopping || maxWait == .zero || now >= due else { return .sleep(until: due) }
        running += 1
        let oldestArrival = arrivals[0]
        guard waiting.count > maxBatch else {
            // Everything waiting goes: hand the array over instead of copying it (a copy taken first
            // would leave `waiting` shared, and emptying it would then copy it once more).
            let batch = waiting
            waiting = []
            arrivals.removeAll(keepingCapacity: true)
            return .execute(batch, oldestArrival: oldestArrival)
        }
        let batch = Array(waiting[..<maxBatch])
        waiting.removeSubrange(..<maxBatch)
        arrivals.removeSubrange(..<maxBatch)
        return .execute(batch, oldestArrival: oldestArrival)
    }

    /// A batch taken by `next` finished (its callers were answered).
    mutating func batchFinished() {
        precondition(running > 0, "BatchQueue: a batch finished that was never taken")
        running -= 1
    }

    /// Graceful stop: what waits goes at once, without waiting out `maxWait`; `next` says `finished`
    /// once nothing waits or runs.
    mutating func stop() {
        stopping = true
    }

    /// Cancellation: the items that will never run, removed.
    mutating func abandonWaiting() -> [Item] {
        defer {
            waiting = []
            arrivals = []
        }
        return waiting
    }
}
