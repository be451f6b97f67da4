import Testing

@testable import DispatcherCore

/// `BatchQueue` without I/O: when a batch goes, how big it is, and who wakes the flush loop.
struct BatchQueueTests {
    let start = ContinuousClock.now

    @Test func withoutAWaitTheFirstItemGoesAtOnceAndOthersGatherWhileSlotsAreBusy() {
        var queue = BatchQueue<Int>(maxBatch: 10, maxConcurrentBatches: 1, maxWait: .zero)
        let woke1 = queue.submitted(0, at: start)
        #expect(woke1, "the first item wakes the loop")
        guard case .execute(let first, _) = queue.next(at: start) else { Issue.record("expected a batch"); return }
        #expect(first == [0])
        // The only slot is busy: items gather, nothing is due, only the first of them wakes the loop.
        let woke2 = queue.submitted(1, at: start)
        #expect(woke2)
        for item in 2..<6 {
            let woke3 = queue.submitted(item, at: start)
            #expect(!woke3)
        }
        guard case .idle = queue.next(at: start + .seconds(1)) else { Issue.record("expected idle while the slot is busy"); return }
        queue.batchFinished()
        guard case .execute(let gathered, _) = queue.next(at: start) else { Issue.record("expected the gathered batch"); return }
        #expect(gathered == [1, 2, 3, 4, 5])
        queue.batchFinished()
        guard case .idle = queue.next(at: start) else { Issue.record("expected idle"); return }
    }

    @Test func aBatchWaitsUpToMaxWaitUnlessItFills() {
        var queue = BatchQueue<Int>(maxBatch: 3, maxConcurrentBatches: 4, maxWait: .milliseconds(5))
        let woke4 = queue.submitted(0, at: start)
        #expect(woke4)
        guard case .sleep(let until) = queue.next(at: start) else { Issue.record("expected a sleep"); return }
        #expect(until == start + .milliseconds(5))
        let woke5 = queue.submitted(1, at: start + .milliseconds(1))
        #expect(!woke5)
        // Before the wait is out: still sleeping until the oldest item's deadline.
        guard case .sleep(let again) = queue.next(at: start + .milliseconds(2)) else { Issue.record("expected a sleep"); return }
        #expect(again == until)
        let woke6 = queue.submitted(2, at: start + .milliseconds(3))
        #expect(woke6, "the item that fills the batch wakes the loop")
        guard case .execute(let full, _) = queue.next(at: start + .milliseconds(3)) else { Issue.record("expected the full batch"); return }
        #expect(full == [0, 1, 2])
        // The next item starts its own wait; once it is out, the batch goes half empty.
        let woke7 = queue.submitted(3, at: start + .milliseconds(10))
        #expect(woke7)
        guard case .execute(let timed, _) = queue.next(at: start + .milliseconds(15)) else { Issue.record("expected the timed batch"); return }
        #expect(timed == [3])
        #expect(queue.running == 2)
    }

    @Test func batchesNeverExceedMaxBatchAndSlotsBoundTheConcurrency() {
        var queue = BatchQueue<Int>(maxBatch: 4, maxConcurrentBatches: 2, maxWait: .zero)
        for item in 0..<11 { _ = queue.submitted(item, at: start) }
        var batches: [[Int]] = []
        while case .execute(let batch, _) = queue.next(at: start) { batches.append(batch) }
        #expect(batches == [[0, 1, 2, 3], [4, 5, 6, 7]])
        queue.batchFinished()
        guard case .execute(let third, _) = queue.next(at: start) else { Issue.record("expected a batch"); return }
        #expect(third == [8, 9, 10])
    }

    @Test func eachBatchNamesWhenItsFirstItemArrived() {
        var queue = BatchQueue<Int>(maxBatch: 2, maxConcurrentBatches: 1, maxWait: .zero)
        for item in 0..<3 { _ = queue.submitted(item, at: start + .milliseconds(item * 10)) }
        guard case .execute(let first, let firstArrival) = queue.next(at: start + .milliseconds(50)) else {
            Issue.record("expected a batch"); return
        }
        #expect(first == [0, 1] && firstArrival == start)
        queue.batchFinished()
        _ = queue.submitted(3, at: start + .milliseconds(60))
        guard case .execute(let second, let secondArrival) = queue.next(at: start + .milliseconds(70)) else {
            Issue.record("expected a batch"); return
        }
        // The item left over from the full batch is the oldest of the next one.
        #expect(second == [2, 3] && secondArrival == start + .milliseconds(20))
    }

    @Test func stoppingSendsWhatWaitsAtOnceThenFinishesWhenNothingRuns() {
        var queue = BatchQueue<Int>(maxBatch: 100, maxConcurrentBatches: 1, maxWait: .seconds(3600))
        _ = queue.submitted(0, at: start)
        guard case .sleep = queue.next(at: start) else { Issue.record("expected a sleep"); return }
        queue.stop()
        guard case .execute(let batch, _) = queue.next(at: start) else { Issue.record("expected the batch at once"); return }
        #expect(batch == [0])
        guard case .idle = queue.next(at: start) else { Issue.record("a batch still runs: not finished"); return }
        queue.batchFinished()
        guard case .finished = queue.next(at: start) else { Issue.record("expected finished"); return }
    }

    @Test func cancellationHandsBackWhatWaits() {
        var queue = BatchQueue<Int>(maxBatch: 2, maxConcurrentBatches: 1, maxWait: .zero)
        for item in 0..<5 { _ = queue.submitted(item, at: start) }
        guard case .execute = queue.next(at: start) else { Issue.record("expected a batch"); return }
        let abandoned = queue.abandonWaiting()
        #expect(abandoned == [2, 3, 4])
        #expect(queue.waiting.isEmpty)
    }
}
