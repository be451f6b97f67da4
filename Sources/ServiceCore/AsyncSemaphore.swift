import Synchronization

/// A counting semaphore for tasks: `acquire()` suspends (never blocks a thread) until a permit is
/// free; waiters are served first come, first served, so that many callers share a budget fairly.
public final class AsyncSemaphore: Sendable {
    private struct State {
        var available: Int
        var waiters: [(id: Int, continuation: CheckedContinuation<Void, any Error>)] = []
        var head = 0
        var nextID = 0
    }

    private let state: Mutex<State>

    /// - Parameter permits: how many holders may hold a permit at once (at least 1).
    public init(permits: Int) {
        state = Mutex(State(available: max(1, permits)))
    }

    /// Takes a permit, waiting for one to be released when none is free.
    /// - Throws: `CancellationError` when the calling task is cancelled while waiting (no permit is then held).
    public func acquire() async throws {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // The cancellation flag is set before `onCancel` runs: a cancellation that the handler
                // missed (nothing queued yet) is seen here, under the same lock.
                let outcome = state.withLock { state -> Bool? in
                    if Task.isCancelled { return false }
                    if state.available > 0, state.head == state.waiters.count {
                        state.available -= 1
                        return true
                    }
                    state.waiters.append((id, continuation))
                    return nil
                }
                switch outcome {
                case true?: continuation.resume()
                case false?: continuation.resume(throwing: CancellationError())
                case nil: break
                }
            }
        } onCancel: {
            state.withLock { state in Self.remove(id, from: &state) }?.resume(throwing: CancellationError())
        }
    }

    /// Returns a permit; the longest waiter, if any, gets it.
    public func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            if state.head < state.waiters.count {
                let waiter = state.waiters[state.head]
                state.head += 1
                if state.head == state.waiters.count {
                    state.waiters.removeAll(keepingCapacity: true)
                    state.head = 0
                } else if state.head >= 1024, state.head * 2 >= state.waiters.count {
                    // Under a budget that never runs dry the queue never empties: drop the served
                    // entries, or the array grows with every waiter ever served.
                    state.waiters.removeFirst(state.head)
                    state.head = 0
                }
                return waiter.continuation
            }
            state.available += 1
            return nil
        }
        next?.resume()
    }

    /// Tasks waiting for a permit right now.
    public var queuedWaiters: Int { state.withLock { $0.waiters.count - $0.head } }

    /// Entries of the waiters' array, served ones not yet dropped included (bounded by about twice
    /// the waiters plus 1,024).
    var storedWaiters: Int { state.withLock { $0.waiters.count } }

    /// Permits free right now.
    public var availablePermits: Int { state.withLock { $0.available } }

    private static func remove(_ id: Int, from state: inout State) -> CheckedContinuation<Void, any Error>? {
        guard let index = state.waiters[state.head...].firstIndex(where: { $0.id == id }) else { return nil }
        let removed = state.waiters.remove(at: index).continuation
        if state.head == state.waiters.count {
            state.waiters.removeAll(keepingCapacity: true)
            state.head = 0
        }
        return removed
    }
}
