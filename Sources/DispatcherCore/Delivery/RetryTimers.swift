import Kafka
import Synchronization

/// Notifications waiting in the process for their next APNs attempt, by partition, so the
/// dispatcher can wake them early to be parked: when their partition's uncommitted span reached
/// its cap, or the partition stops (revoked, shutdown). Waiting here is a suspended task and a
/// timer (a child task of the wait), not a thread, a processing slot or a budget permit.
final class RetryTimers: Sendable {
    /// How a wait ended.
    enum Wake: Sendable, Equatable {
        /// The delay passed: send again.
        case elapsed
        /// Woken early: park the notification now.
        case park
    }

    private struct Entry {
        var partition: KafkaTopicPartition
        var continuation: CheckedContinuation<Wake, any Error>?
        /// Resolved before the waiter suspended.
        var early: Result<Wake, any Error>?
    }

    private let state = Mutex<(entries: [Int: Entry], nextID: Int)>(([:], 0))

    /// Notifications waiting now (for the `push_retries_waiting` count in logs and tests).
    var waiting: Int { state.withLock { $0.entries.count } }

    /// Waits `delay`, or less when the partition wakes its waiters to park.
    /// - Returns: `.elapsed` or `.park`.
    /// - Throws: `CancellationError` when the calling task is cancelled.
    func sleep(for delay: Duration, partition: KafkaTopicPartition) async throws -> Wake {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            state.entries[state.nextID] = Entry(partition: partition)
            return state.nextID
        }
        // The timer is a child task of this call: it resolves the wait when the delay passed, and is
        // cancelled once the wait ended otherwise.
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // Cancelled: the wait ends otherwise (woken, or the caller cancelled).
                guard (try? await Task.sleep(for: delay)) != nil else { return }
                self.resolve(id, .success(.elapsed))
            }
            defer { group.cancelAll() }
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Wake, any Error>) in
                    let ready = state.withLock { state -> Result<Wake, any Error>? in
                        guard var entry = state.entries[id] else { return .success(.elapsed) }
                        if let early = entry.early {
                            state.entries[id] = nil
                            return early
                        }
                        entry.continuation = continuation
                        state.entries[id] = entry
                        return nil
                    }
                    if let ready { continuation.resume(with: ready) }
                }
            } onCancel: {
                self.resolve(id, .failure(CancellationError()))
            }
        }
    }

    /// Wakes every notification of `partition` waiting now, to be parked.
    /// - Returns: how many were woken.
    @discardableResult
    func parkAll(of partition: KafkaTopicPartition) -> Int {
        parkAll { $0 == partition }
    }

    /// Wakes every waiting notification of the partitions `matching` selects (all when nil), to be parked.
    @discardableResult
    func parkAll(where matching: ((KafkaTopicPartition) -> Bool)? = nil) -> Int {
        let ids = state.withLock { state in state.entries.filter { matching?($0.value.partition) ?? true }.map(\.key) }
        for id in ids { resolve(id, .success(.park)) }
        return ids.count
    }

    private func resolve(_ id: Int, _ result: Result<Wake, any Error>) {
        let continuation = state.withLock { state -> CheckedContinuation<Wake, any Error>? in
            guard var entry = state.entries[id] else { return nil }
            if let continuation = entry.continuation {
                state.entries[id] = nil
                return continuation
            }
            if entry.early == nil { entry.early = result }
            state.entries[id] = entry
            return nil
        }
        continuation?.resume(with: result)
    }
}
