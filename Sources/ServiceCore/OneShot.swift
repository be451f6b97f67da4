import Synchronization

/// A signal that fires once; ``wait()`` returns when it fired or the waiting task is cancelled.
public final class OneShot: Sendable {
    private let state = Mutex<(fired: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    public init() {}

    /// Fires the signal (later calls do nothing).
    public func fire() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard !state.fired else { return [] }
            state.fired = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Whether it fired.
    public var isFired: Bool { state.withLock { $0.fired } }

    /// Returns once fired, or at once when the task is cancelled.
    public func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.fired || Task.isCancelled { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            fire()
        }
    }
}
