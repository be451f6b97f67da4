import Foundation
import Synchronization
import Testing

@testable import DispatcherCore

/// `Acknowledgements`: publications report their end through a callback (no task per record), and
/// `waitForAll` returns once every one ended, with the first error.
@Suite struct AcknowledgementsTests {
    /// Callbacks that arrive later, out of order and from another thread end the wait only after the
    /// last one; nothing started means nothing to wait for.
    @Test func waitForAllReturnsAfterTheLastAcknowledgement() async throws {
        try await Acknowledgements().waitForAll()
        let acks = Acknowledgements()
        let ends = Mutex<[@Sendable ((any Error)?) -> Void]>([])
        for _ in 0..<3 { acks.start { ended in ends.withLock { $0.append(ended) } } }
        let finished = Flag()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await acks.waitForAll()
                finished.value.store(true, ordering: .sequentiallyConsistent)
            }
            let callbacks = ends.withLock { $0 }
            callbacks[2](nil)
            callbacks[0](nil)
            // Absence cannot be waited for: 50 ms is long enough for a waiter that returned early to show.
            try await Task.sleep(for: .milliseconds(50))
            let early = finished.value.load(ordering: .sequentiallyConsistent)
            #expect(!early)
            let last = callbacks[1]
            Thread.detachNewThread { last(nil) }  // the producer's poll thread calls back, not a task
            try await group.waitForAll()
        }
        let done = finished.value.load(ordering: .sequentiallyConsistent)
        #expect(done)
    }

    /// The first failed publication is the request's error; the wait still ends only after the others.
    @Test func theFirstErrorIsTheRequests() async throws {
        struct Refused: Error {}
        struct Later: Error {}
        let acks = Acknowledgements()
        acks.start { ended in ended(Refused()) }
        acks.start { ended in ended(Later()) }
        acks.start { ended in ended(nil) }
        await #expect(throws: Refused.self) { try await acks.waitForAll() }
    }
}

private final class Flag: Sendable {
    let value = Atomic<Bool>(false)
}
