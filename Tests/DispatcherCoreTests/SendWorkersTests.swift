@testable import DispatcherCore
import ServiceCore
import Synchronization
import Testing

/// `SendWorkers` without I/O: sends are closures that wait on a `OneShot` the test fires.
@Suite(.timeLimit(.minutes(1))) struct SendWorkersTests {
    struct Failure: Error {}

    final class Log: Sendable {
        let ran = Mutex<[Int]>([])
        let running = Atomic<Int>(0)
        let started = Atomic<Int>(0)
    }

    /// Waits until `condition` holds (a deadline, not a sleep-then-assert).
    func eventually(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            try #require(ContinuousClock.now < deadline, "condition not met within 10 s")
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    @Test func concurrentSendsEachGetAWorkerAndEveryItemRunsOnce() async throws {
        let log = Log()
        let gate = OneShot()
        let workers = SendWorkers<Int>()
        try await withThrowingDiscardingTaskGroup { group in
            defer { workers.close() }
            // 50 sends that all wait: each finds no idle worker, so 50 workers run them at once.
            for item in 0..<50 where workers.submit(item) {
                log.started.add(1, ordering: .relaxed)
                group.addTask {
                    try await workers.run { item in
                        log.running.add(1, ordering: .relaxed)
                        await gate.wait()
                        log.ran.withLock { $0.append(item) }
                    }
                }
            }
            try await eventually { log.running.load(ordering: .relaxed) == 50 }
            gate.fire()
        }
        #expect(log.started.load(ordering: .relaxed) == 50)
        #expect(log.ran.withLock { $0.sorted() } == Array(0..<50))
    }

    @Test func sendsOneAfterAnotherReuseOneWorker() async throws {
        let log = Log()
        let workers = SendWorkers<Int>()
        try await withThrowingDiscardingTaskGroup { group in
            defer { workers.close() }
            for item in 0..<200 {
                if workers.submit(item) {
                    log.started.add(1, ordering: .relaxed)
                    group.addTask { try await workers.run { item in log.ran.withLock { $0.append(item) } } }
                }
                // The send finished and its worker is idle again before the next is submitted.
                try await eventually { log.ran.withLock { $0.count } == item + 1 }
                try await eventually { workers.idleWorkers == 1 }
            }
        }
        #expect(log.started.load(ordering: .relaxed) == 1)
        #expect(log.ran.withLock { $0 } == Array(0..<200))
    }

    @Test func aFailingSendEndsItsWorkerAndTheSendsQueuedForOthersStillRun() async throws {
        let log = Log()
        let gate = OneShot()
        let workers = SendWorkers<Int>()
        await #expect(throws: Failure.self) {
            try await withThrowingDiscardingTaskGroup { group in
                defer { workers.close() }
                for item in 0..<3 where workers.submit(item) {
                    group.addTask {
                        try await workers.run { item in
                            if item == 0 {
                                await gate.wait()
                                throw Failure()
                            }
                            log.ran.withLock { $0.append(item) }
                        }
                    }
                }
                try await eventually { log.ran.withLock { $0.count } == 2 }
                gate.fire()
            }
        }
        // Items 1 and 2 ran in workers of their own; item 0's failure ended only its worker.
        #expect(log.ran.withLock { $0.sorted() } == [1, 2])
    }

    @Test func closingEndsIdleWorkers() async throws {
        let log = Log()
        let ended = Log()
        let workers = SendWorkers<Int>()
        try await withThrowingDiscardingTaskGroup { group in
            for item in 0..<3 where workers.submit(item) {
                log.started.add(1, ordering: .relaxed)
                group.addTask {
                    defer { ended.started.add(1, ordering: .relaxed) }
                    try await workers.run { item in log.ran.withLock { $0.append(item) } }
                }
            }
            // Every send ran and every worker waits for another: only close() ends them.
            try await eventually { log.ran.withLock { $0.count } == 3 && workers.idleWorkers == log.started.load(ordering: .relaxed) }
            #expect(ended.started.load(ordering: .relaxed) == 0)
            workers.close()
        }
        #expect(ended.started.load(ordering: .relaxed) == log.started.load(ordering: .relaxed))
        #expect(workers.idleWorkers == 0)
    }
}
