import Synchronization

/// The graceful-shutdown trigger a `ServiceGroup` hands to its services.
///
/// Graceful shutdown is not cancellation: a service that sees the trigger stops taking new work,
/// finishes what is in progress and returns. Task cancellation comes only when shutdown has to be
/// escalated (a second signal, or the group's grace period elapsed) and means "stop now".
///
/// A service either suspends in `wait()` (a server that only has to stop accepting) or registers a
/// handler with `onTrigger(_:)` (a loop that checks a flag between units of work). All members are
/// safe to call from any thread or task.
public final class GracefulShutdown: Sendable {
    struct State {
        var isTriggered = false
        var nextID: UInt64 = 0
        var handlers: [UInt64: @Sendable () -> Void] = [:]
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        /// Waiters whose task was cancelled before they suspended.
        var cancelledWaiters: Set<UInt64> = []
    }

    let state = Mutex(State())
    /// `State.isTriggered` for readers in hot loops (a send checks it per notification): no lock.
    private let triggered = Atomic<Bool>(false)

    /// Creates a trigger that has not fired.
    public init() {}

    /// Whether `trigger()` was called. Lock-free.
    public var isTriggered: Bool { triggered.load(ordering: .acquiring) }

    /// Fires the trigger: resumes every `wait()` and runs every registered handler once, on the
    /// calling thread, after the internal lock is released. Idempotent: later calls do nothing.
    public func trigger() {
        let (handlers, waiters) = state.withLock { s -> ([@Sendable () -> Void], [CheckedContinuation<Void, Never>]) in
            guard !s.isTriggered else { return ([], []) }
            s.isTriggered = true
            triggered.store(true, ordering: .releasing)
            let handlers = s.handlers.sorted { $0.key < $1.key }.map(\.value)
            let waiters = Array(s.waiters.values)
            s.handlers = [:]
            s.waiters = [:]
            return (handlers, waiters)
        }
        for waiter in waiters { waiter.resume() }
        for handler in handlers { handler() }
    }

    /// Suspends until the trigger fires; returns at once when it already has. Also returns when the
    /// calling task is cancelled, so a service waiting here notices escalation: check
    /// `Task.isCancelled` (or `isTriggered`) afterwards to tell the two apart.
    public func wait() async {
        let id: UInt64? = state.withLock { s in
            guard !s.isTriggered else { return nil }
            s.nextID += 1
            return s.nextID
        }
        guard let id else { return }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { s -> Bool in
                    if s.isTriggered || s.cancelledWaiters.remove(id) != nil { return true }
                    s.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let continuation = state.withLock { s -> CheckedContinuation<Void, Never>? in
                if let continuation = s.waiters.removeValue(forKey: id) { return continuation }
                // Not suspended yet (or already resumed by `trigger()`, which needs no note).
                if !s.isTriggered { s.cancelledWaiters.insert(id) }
                return nil
            }
            continuation?.resume()
        }
    }
}
