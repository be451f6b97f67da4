import PushTestSupport
import ServiceCore
import Synchronization
import Testing

/// A count shared by test tasks.
private final class Tally: Sendable {
    private let count = Atomic<Int>(0)
    func increment() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// `CallQueue`: calls enqueued from any thread run as children of `serve`, which ends on `finish()`
/// (or cancellation) after cancelling and awaiting the calls still running.
@Suite struct CallQueueTests {
    @Test func callsEnqueuedBeforeAndWhileServingRunAndFinishEndsServeAfterCancellingTheRest() async throws {
        let queue = CallQueue<Int>()
        let ran = Tally()
        let cancelled = Tally()
        let endless = OneShot()
        #expect(queue.enqueue(1))  // before serve runs: it waits
        let served = OneShot()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await queue.serve { call in
                    ran.increment()
                    guard call == 3 else { return }
                    await endless.wait()  // never fired: returns only when cancelled
                    if Task.isCancelled { cancelled.increment() }
                }
                served.fire()
            }
            #expect(queue.enqueue(2) && queue.enqueue(3))
            try await eventually("three calls to run") { ran.value == 3 }
            #expect(!served.isFired)
            queue.finish()
            try await eventually("serve() to return") { served.isFired }
            #expect(cancelled.value == 1, "the call still running was cancelled, and awaited")
            #expect(!queue.enqueue(4), "a call after finish() is dropped")
            try await group.waitForAll()
        }
        #expect(ran.value == 3)
    }

    @Test func cancellingServeEndsItAndDropsLaterCalls() async throws {
        let queue = CallQueue<Int>()
        let started = Tally()
        let cancelled = Tally()
        let endless = OneShot()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await queue.serve { _ in
                    started.increment()
                    await endless.wait()
                    if Task.isCancelled { cancelled.increment() }
                }
            }
            queue.enqueue(1)
            try? await eventually("the call to start") { started.value == 1 }
            group.cancelAll()
            await group.waitForAll()
        }
        #expect(cancelled.value == 1)
        #expect(!queue.enqueue(2))
    }
}
