import Synchronization

/// The Kafka acknowledgements one request (or page, or re-drive) still waits for. Feedback records
/// are produced without awaiting each acknowledgement in turn, and without a task per record: the
/// producer calls back when Kafka acknowledged a record (or it failed), so a record already queued goes
/// out and is counted even when the handling that started it is cancelled. The request is finished
/// only when every one arrived (`waitForAll`), and fails with the first error.
final class Acknowledgements: Sendable {
    private struct State {
        var pending = 0
        var firstError: (any Error)?
        var waiter: CheckedContinuation<Void, any Error>?
    }

    private let state = Mutex(State())

    init() {}

    /// Starts one publication without waiting for it: `publish` produces a record and calls the
    /// closure it is given exactly once, with nil on Kafka's acknowledgement or with the error that
    /// ended the record.
    func start(_ publish: (_ acknowledged: @escaping @Sendable ((any Error)?) -> Void) -> Void) {
        state.withLock { $0.pending += 1 }
        publish { [self] failure in ended(failure) }
    }

    private func ended(_ failure: (any Error)?) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            state.pending -= 1
            if let failure, state.firstError == nil { state.firstError = failure }
            guard state.pending == 0, let waiter = state.waiter else { return nil }
            state.waiter = nil
            return waiter
        }
        if let waiter {
            if let error = state.withLock({ $0.firstError }) { waiter.resume(throwing: error) } else { waiter.resume() }
        }
    }

    /// Returns once every started publication was acknowledged.
    /// - Throws: the first publication's error (`KafkaError`);
    ///   `CancellationError` when the calling task is cancelled first (the publications go on; the
    ///   request is not finished).
    func waitForAll() async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let ready = state.withLock { state -> Result<Void, any Error>? in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if state.pending > 0 {
                        state.waiter = continuation
                        return nil
                    }
                    if let error = state.firstError { return .failure(error) }
                    return .success(())
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }?.resume(throwing: CancellationError())
        }
    }
}
