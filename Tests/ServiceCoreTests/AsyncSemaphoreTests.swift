import Synchronization
import Testing

@testable import ServiceCore

/// A counter shared by test tasks.
private final class Counters: Sendable {
    let holders = Atomic<Int>(0)
    let highest = Atomic<Int>(0)
    let order = Mutex<[Int]>([])
}

@Suite(.timeLimit(.minutes(1))) struct AsyncSemaphoreTests {
    @Test func neverMoreHoldersThanPermits() async throws {
        let semaphore = AsyncSemaphore(permits: 3)
        let counters = Counters()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<200 {
                group.addTask {
                    try await semaphore.acquire()
                    let now = counters.holders.add(1, ordering: .relaxed).newValue
                    counters.highest.max(now, ordering: .relaxed)
                    await Task.yield()
                    counters.holders.subtract(1, ordering: .relaxed)
                    semaphore.release()
                }
            }
            try await group.waitForAll()
        }
        #expect(counters.highest.load(ordering: .relaxed) <= 3)
        #expect(counters.highest.load(ordering: .relaxed) >= 1)
        #expect(semaphore.availablePermits == 3)
    }

    @Test func aCancelledWaiterLeavesWithoutAPermit() async throws {
        let semaphore = AsyncSemaphore(permits: 1)
        try await semaphore.acquire()
        let waiter = Task { try await semaphore.acquire() }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        semaphore.release()
        #expect(semaphore.availablePermits == 1)
    }

    @Test func waitersAreServedInArrivalOrder() async throws {
        let semaphore = AsyncSemaphore(permits: 1)
        try await semaphore.acquire()
        let counters = Counters()
        var tasks: [Task<Void, any Error>] = []
        for index in 0..<5 {
            tasks.append(Task {
                try await semaphore.acquire()
                counters.order.withLock { $0.append(index) }
                semaphore.release()
            })
            // Each waiter queues before the next starts.
            while semaphore.queuedWaiters < index + 1 { await Task.yield() }
        }
        semaphore.release()
        for task in tasks { try await task.value }
        #expect(counters.order.withLock { $0 } == [0, 1, 2, 3, 4])
    }

    /// A budget that never runs dry (a campaign's lane, a large fan-out's notifications) always has
    /// waiters queued, so the queue never empties: its storage stays bounded all the same, instead of
    /// keeping an entry for every waiter ever served.
    @Test func aQueueThatNeverEmptiesStaysBounded() async throws {
        let semaphore = AsyncSemaphore(permits: 1)
        try await semaphore.acquire()
        let served = Counters()
        func enqueue() async {
            let before = semaphore.queuedWaiters
            Task {
                try await semaphore.acquire()
                served.holders.add(1, ordering: .relaxed)
            }
            while semaphore.queuedWaiters < before + 1 { await Task.yield() }
        }
        await enqueue()
        await enqueue()
        var largest = 0
        for round in 1...5_000 {
            // Hand the permit to the oldest waiter (it keeps it), then queue another: one always waits.
            semaphore.release()
            while served.holders.load(ordering: .relaxed) < round { await Task.yield() }
            await enqueue()
            largest = max(largest, semaphore.storedWaiters)
        }
        #expect(semaphore.queuedWaiters == 2)
        #expect(largest <= 2 * 2 + 1_024, "the waiters' array held \(largest) entries for 2 waiters")
    }
}
