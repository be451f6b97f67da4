import Foundation

/// A thread of its own for blocking C calls (`PQexec`, `rd_kafka_flush`, `poll`), so that they never
/// occupy one of the two threads of Swift's cooperative pool.
///
/// Jobs run one at a time in submission order. `run(_:)` suspends the caller until its job finished.
/// The thread ends when `shutdown()` is called or the object is released; jobs still queued then
/// still run, and jobs submitted later fail with `CancellationError`.
public final class DedicatedThread: Sendable {
    private let queue = JobQueue()
    /// The thread's name, as shown by `top -H` and in crash logs.
    public let name: String

    /// Starts a thread named `name` (the kernel keeps its first 15 bytes: `NamedThread`).
    public init(name: String) {
        self.name = name
        let queue = self.queue
        NamedThread.start(name: name) {
            while let job = queue.next() { job() }
        }
    }

    deinit { shutdown() }

    /// Runs `body` on the dedicated thread and returns its result.
    /// - Throws: what `body` throws, or `CancellationError` when the thread was shut down first.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let accepted = submit { continuation.resume(with: Result { try body() }) }
            if !accepted { continuation.resume(throwing: CancellationError()) }
        }
    }

    /// Queues `job` without waiting for it. Returns `false` when the thread was shut down.
    @discardableResult
    public func submit(_ job: @escaping @Sendable () -> Void) -> Bool {
        queue.append(job)
    }

    /// Lets queued jobs finish, then ends the thread. Later `run` calls throw `CancellationError`.
    public func shutdown() {
        queue.stop()
    }
}

/// FIFO of jobs guarded by one `NSCondition` (every field is read and written only while it is held).
/// A job's slot is emptied when the job is taken, so what its closure captured (a statement's
/// parameters, a batch of records) is freed as soon as it ran, not when the array is compacted.
private final class JobQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [(@Sendable () -> Void)?] = []
    private var head = 0
    private var stopped = false

    func append(_ job: @escaping @Sendable () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !stopped else { return false }
        jobs.append(job)
        condition.signal()
        return true
    }

    /// The next job, waiting for one; `nil` once stopped and drained.
    func next() -> (@Sendable () -> Void)? {
        condition.lock()
        defer { condition.unlock() }
        while head == jobs.count {
            if stopped { return nil }
            condition.wait()
        }
        let job = jobs[head]
        jobs[head] = nil
        head += 1
        if head > 1024, head * 2 > jobs.count {
            jobs.removeFirst(head)
            head = 0
        }
        return job
    }

    func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }
}
