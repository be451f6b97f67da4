import ServiceCore
import Synchronization

/// The Kafka acknowledgements one request (or page, or re-drive) still waits for. Feedback records
/// are produced without awaiting each acknowledgement in turn: each publication runs as a child task
/// of the processor's `PublicationRunner`, so it goes on when the handling that started it is
/// cancelled (a record already queued in the producer still goes out). The request is finished only
/// when every one arrived (`waitForAll`), and fails with the first error.
final class Acknowledgements: Sendable {
    private struct State {
        var pending = 0
        var firstError: (any Error)?
        var waiter: CheckedContinuation<Void, any Error>?
    }

    private let state = Mutex(State())
    private let runner: PublicationRunner

    /// - Parameter runner: where the publications run (the processor's).
    init(_ runner: PublicationRunner) { self.runner = runner }

    /// Starts `publish` (a produce that resolves on Kafka's acknowledgement) without waiting for it.
    /// When the runner stopped already, the publication fails (`PublicationRunner.Stopped`): the
    /// request is not finished and is handled again.
    func start(_ publish: @escaping @Sendable () async throws -> Void) {
        state.withLock { $0.pending += 1 }
        let submitted = runner.submit { [self] in
            var failure: (any Error)?
            do { try await publish() } catch { failure = error }
            ended(failure)
        }
        if !submitted { ended(PublicationRunner.Stopped()) }
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
    /// - Throws: the first publication's error (`KafkaError`, `PublicationRunner.Stopped`);
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

/// Runs the feedback publications of a `SendRequestProcessor` (`Acknowledgements.start`) as child
/// tasks of one task group: a `Service` among the processor's `batchers`, so it runs while the
/// processor is used and stops after everything that publishes through it. Graceful shutdown takes
/// no new publication and lets those started finish (their acknowledgements are awaited by their
/// requests); cancellation cancels them.
final class PublicationRunner: Service, Sendable {
    /// A publication submitted after the runner stopped.
    struct Stopped: Error, CustomStringConvertible {
        var description: String { "the feedback publication runner has stopped" }
    }

    typealias Job = @Sendable () async -> Void
    private let jobs: AsyncStream<Job>
    private let continuation: AsyncStream<Job>.Continuation

    init() { (jobs, continuation) = AsyncStream.makeStream(of: Job.self) }

    /// Queues `job` (unbounded: each is one produced record the caller already accounted for).
    /// - Returns: false when the runner has stopped (the job does not run).
    func submit(_ job: @escaping Job) -> Bool {
        if case .terminated = continuation.yield(job) { return false }
        return true
    }

    /// Runs every submitted publication until `shutdown` triggers, then those already submitted, and
    /// returns when all have ended.
    func run(shutdown: GracefulShutdown) async throws {
        await withDiscardingTaskGroup { group in
            group.addTask { [continuation] in
                await shutdown.wait()
                continuation.finish()
            }
            // Ends when the shutdown watcher finished the stream (the jobs started run to their end)
            // or when the task is cancelled (the group's children are cancelled with it).
            for await job in jobs {
                group.addTask { await job() }
            }
        }
    }
}
