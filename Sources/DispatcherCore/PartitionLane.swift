import Kafka
import Synchronization

/// The records of one partition waiting for the dispatcher, in offset order: one worker takes them
/// one at a time, so records of a partition stay in order while partitions proceed independently
/// (a slow request holds back only its own partition).
///
/// Holds at most `capacity` records: `push` waits while it is full, which makes the consumer stop
/// pulling records instead of buffering without bound.
final class PartitionLane: Sendable {
    private struct State {
        var queue: [KafkaMessage] = []
        var head = 0
        var waitingWorker: CheckedContinuation<KafkaMessage?, Never>?
        var waitingPushers: [CheckedContinuation<Void, Never>] = []
        var finished = false
        var busy = false
        var count: Int { queue.count - head }
    }

    private let state = Mutex(State())
    private let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// Adds a record, waiting while the lane is full.
    func push(_ message: KafkaMessage) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let worker: CheckedContinuation<KafkaMessage?, Never>? = state.withLock { state in
                if let worker = state.waitingWorker {
                    state.waitingWorker = nil
                    state.busy = true
                    continuation.resume()
                    return worker
                }
                state.queue.append(message)
                if state.count < capacity || state.finished {
                    continuation.resume()
                } else {
                    state.waitingPushers.append(continuation)
                }
                return nil
            }
            worker?.resume(returning: message)
        }
    }

    /// The next record for the worker (marking the lane busy until `done()`), or nil once finished.
    func next() async -> KafkaMessage? {
        await withCheckedContinuation { (continuation: CheckedContinuation<KafkaMessage?, Never>) in
            let pusher: CheckedContinuation<Void, Never>? = state.withLock { state in
                state.busy = false
                if state.count > 0 {
                    let message = state.queue[state.head]
                    state.head += 1
                    if state.head > 64, state.head * 2 > state.queue.count {
                        state.queue.removeFirst(state.head)
                        state.head = 0
                    }
                    state.busy = true
                    continuation.resume(returning: message)
                    return state.waitingPushers.isEmpty ? nil : state.waitingPushers.removeFirst()
                }
                if state.finished {
                    continuation.resume(returning: nil)
                } else {
                    state.waitingWorker = continuation
                }
                return nil
            }
            pusher?.resume()
        }
    }

    /// The worker finished the record it took.
    func done() {
        state.withLock { $0.busy = false }
    }

    /// Drops the records not yet taken (their partition was revoked: the next owner reads them from
    /// the committed offset).
    func dropQueued() {
        let pushers = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.queue.removeAll()
            state.head = 0
            defer { state.waitingPushers.removeAll() }
            return state.waitingPushers
        }
        for pusher in pushers { pusher.resume() }
    }

    /// Whether the worker is handling a record right now.
    var isBusy: Bool { state.withLock { $0.busy } }

    /// Ends the lane: the worker gets nil once the queue is empty; waiting pushers return.
    func finish() {
        let (worker, pushers) = state.withLock { state -> (CheckedContinuation<KafkaMessage?, Never>?, [CheckedContinuation<Void, Never>]) in
            state.finished = true
            let worker = state.waitingWorker
            state.waitingWorker = nil
            defer { state.waitingPushers.removeAll() }
            return (worker, state.waitingPushers)
        }
        worker?.resume(returning: nil)
        for pusher in pushers { pusher.resume() }
    }
}
