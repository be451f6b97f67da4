import Synchronization

extension DedicatedThread {
    /// Runs `body` on the dedicated thread like `run(_:)`, but stops waiting when the calling task is
    /// cancelled: the call then throws `CancellationError` at once, while `body` (a blocking C call cannot
    /// be interrupted) still runs to its end on the thread and its result is dropped.
    ///
    /// For probes whose answer is worthless once their caller stopped (a metadata request, a health
    /// probe): a task group's child that makes one ends on cancellation instead of holding the group for
    /// as long as the probe's own timeout.
    /// - Throws: what `body` throws; `CancellationError` when the calling task is cancelled before `body`
    ///   returned, or when the thread was shut down first.
    public func runUnlessCancelled<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        let slot = ResultSlot<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                guard slot.install(continuation) else { return }  // cancelled first: already resumed
                let accepted = submit { slot.deliver(Result { try body() }) }
                if !accepted { slot.deliver(.failure(CancellationError())) }
            }
        } onCancel: {
            slot.deliver(.failure(CancellationError()))
        }
    }
}

/// The one outcome of a `runUnlessCancelled` call, from the job or from cancellation, whichever comes
/// first; the continuation is resumed exactly once, outside the lock.
private final class ResultSlot<T: Sendable>: Sendable {
    private enum State {
        case empty
        case waiting(CheckedContinuation<T, any Error>)
        /// Delivered before the continuation was installed (cancellation came first), or resumed.
        case done
    }

    private let state = Mutex(State.empty)

    /// Installs `continuation`. Returns `false` (after resuming it with `CancellationError`) when the
    /// outcome came first, which only cancellation can do.
    func install(_ continuation: CheckedContinuation<T, any Error>) -> Bool {
        let installed = state.withLock { state -> Bool in
            guard case .empty = state else { return false }
            state = .waiting(continuation)
            return true
        }
        if !installed { continuation.resume(throwing: CancellationError()) }
        return installed
    }

    /// Resumes the waiting continuation with `result`; does nothing when an outcome was delivered before.
    func deliver(_ result: Result<T, any Error>) {
        let continuation = state.withLock { state -> CheckedContinuation<T, any Error>? in
            switch state {
            case .waiting(let continuation):
                state = .done
                return continuation
            case .empty:
                state = .done
                return nil
            case .done:
                return nil
            }
        }
        continuation?.resume(with: result)
    }
}
