import Kafka
import Testing

@testable import DispatcherCore

/// The engine's decisions without Kafka: the offset tracker and the partition scheduler.
@Suite struct OffsetTrackerTests {
    @Test func outOfOrderFinishesCommitOnlyTheFinishedPrefix() {
        var tracker = OffsetTracker()
        for offset in 0..<5 { tracker.start(KafkaOffset(rawValue: Int64(offset))) }
        let r1 = tracker.finish(2)
        #expect(r1 == nil)
        let r2 = tracker.finish(1)
        #expect(r2 == nil)
        #expect(tracker.committable == nil)
        let r3 = tracker.finish(0)
        #expect(r3 == 3)
        #expect(tracker.uncommitted == 2)
        #expect(tracker.oldestUnfinished == 3)
        let r4 = tracker.finish(4)
        #expect(r4 == nil)
        let r5 = tracker.finish(3)
        #expect(r5 == 5)
        #expect(tracker.uncommitted == 0)
        #expect(tracker.oldestUnfinished == nil)
    }

    @Test func gapsInOffsetsAreSkipped() {
        var tracker = OffsetTracker()
        tracker.start(10)
        tracker.start(13)  // 11 and 12 were transaction markers
        tracker.start(20)
        let r6 = tracker.finish(13)
        #expect(r6 == nil)
        let r7 = tracker.finish(10)
        #expect(r7 == 14)
        let r8 = tracker.finish(20)
        #expect(r8 == 21)
    }

    @Test func repeatsUnknownAndOutOfOrderStartsChangeNothing() {
        var tracker = OffsetTracker()
        let r9 = tracker.start(5)
        #expect(r9)
        let r10 = tracker.start(5)
        #expect(!r10)
        let r11 = tracker.start(4)
        #expect(!r11)
        let r12 = tracker.finish(7)
        #expect(r12 == nil)
        let r13 = tracker.finish(5)
        #expect(r13 == 6)
        let r14 = tracker.finish(5)
        #expect(r14 == nil)
        let r15 = tracker.start(3)
        #expect(!r15)
        #expect(tracker.committable == 6)
    }

    @Test func abandonedRecordsNeverMoveTheOffset() {
        var tracker = OffsetTracker()
        for offset in 0..<4 { tracker.start(KafkaOffset(rawValue: Int64(offset))) }
        tracker.finish(0)
        tracker.finish(2)
        tracker.abandonUnfinished()  // revocation: 1 and 3 are left for the next owner
        #expect(tracker.committable == 1)
        let r16 = tracker.finish(3)
        #expect(r16 == nil)
        let r17 = tracker.finish(1)
        #expect(r17 == nil)
        #expect(tracker.committable == 1)
    }

    @Test func manyRecordsFinishedInRandomOrderEndAtTheLastOffset() {
        var tracker = OffsetTracker()
        var generator = SystemRandomNumberGenerator()
        let offsets = (0..<5_000).map { KafkaOffset(rawValue: Int64($0)) }
        for offset in offsets { tracker.start(offset) }
        var highest: KafkaOffset?
        var finished = Set<Int64>()
        for offset in offsets.shuffled(using: &generator) {
            finished.insert(offset.rawValue)
            if let stored = tracker.finish(offset) {
                // Never past an unfinished record.
                #expect((0..<stored.rawValue).allSatisfy { finished.contains($0) })
                highest = stored
            }
        }
        #expect(highest == 5_000)
        #expect(tracker.uncommitted == 0)
    }
}

@Suite struct PartitionSchedulerTests {
    static func record(_ offset: Int64, key: String? = nil) -> KafkaMessage {
        KafkaMessage(
            topic: "push.send-requests.v1", partition: 0, offset: KafkaOffset(rawValue: offset),
            key: key.map { Array($0.utf8) }, value: [], headers: [], timestamp: nil)
    }

    @Test func differentKeysRunInParallelUpToTheBudget() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 2), pauseThreshold: 100)
        let r18 = scheduler.receive(Self.record(0, key: "a"))
        #expect(r18.map(\.offset) == [0])
        let r19 = scheduler.receive(Self.record(1, key: "b"))
        #expect(r19.map(\.offset) == [1])
        let r20 = scheduler.receive(Self.record(2, key: "c"))  // budget full: waits
        #expect(r20.isEmpty)
        let (store, next) = scheduler.finish([Self.record(1, key: "b")])
        #expect(store == nil)  // 0 still runs
        #expect(next.map(\.offset) == [2])
        let done = scheduler.finish([Self.record(0, key: "a")])
        #expect(done.store == 2)
        #expect(done.next.isEmpty)
        let r21 = scheduler.finish([Self.record(2, key: "c")])
        #expect(r21.store == 3)
        #expect(scheduler.pending == 0)
    }

    @Test func sameKeyRunsInOffsetOrderWhileOtherKeysOvertake() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 10), pauseThreshold: 100)
        let r22 = scheduler.receive(Self.record(0, key: "r1"))
        #expect(r22.map(\.offset) == [0])
        let r23 = scheduler.receive(Self.record(1, key: "r1"))
        #expect(r23.isEmpty)
        let r24 = scheduler.receive(Self.record(2, key: "r1"))
        #expect(r24.isEmpty)
        let r25 = scheduler.receive(Self.record(3, key: "r2"))
        #expect(r25.map(\.offset) == [3])
        let r26 = scheduler.finish([Self.record(3, key: "r2")])
        #expect(r26.store == nil)
        let first = scheduler.finish([Self.record(0, key: "r1")])
        #expect(first.store == 1)
        #expect(first.next.map(\.offset) == [1])
        let second = scheduler.finish(first.next)
        #expect(second.next.map(\.offset) == [2])
        let r27 = scheduler.finish(second.next)
        #expect(r27.store == 4)
    }

    @Test func aFreedSuccessorStartsBeforeNewerQueuedRecords() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 1), pauseThreshold: 100)
        _ = scheduler.receive(Self.record(0, key: "a"))
        _ = scheduler.receive(Self.record(1, key: "a"))
        _ = scheduler.receive(Self.record(2, key: "b"))
        // 1 became startable when 0 finished and is older than 2.
        let r28 = scheduler.finish([Self.record(0, key: "a")])
        #expect(r28.next.map(\.offset) == [1])
        let r29 = scheduler.finish([Self.record(1, key: "a")])
        #expect(r29.next.map(\.offset) == [2])
    }

    @Test func recordsWithoutKeyHaveNoOrder() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 5), pauseThreshold: 100)
        let r30 = scheduler.receive(Self.record(0))
        #expect(r30.count == 1)
        let r31 = scheduler.receive(Self.record(1))
        #expect(r31.count == 1)
    }

    @Test func orderedModeRunsOneBatchAtATime() {
        var scheduler = PartitionScheduler(mode: .ordered(batchSize: 3), pauseThreshold: 100)
        let r32 = scheduler.receive(Self.record(0))
        #expect(r32.map(\.offset) == [0])
        for offset in 1...5 { #expect(scheduler.receive(Self.record(Int64(offset))).isEmpty) }
        let first = scheduler.finish([Self.record(0)])
        #expect(first.store == 1)
        #expect(first.next.map(\.offset) == [1, 2, 3])
        let second = scheduler.finish(first.next)
        #expect(second.store == 4)
        #expect(second.next.map(\.offset) == [4, 5])
        let last = scheduler.finish(second.next)
        #expect(last.store == 6)
        #expect(last.next.isEmpty)
    }

    @Test func abandonedWorkKeepsTheOffsetAndStopDropsTheQueue() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 1), pauseThreshold: 100)
        _ = scheduler.receive(Self.record(0, key: "a"))
        _ = scheduler.receive(Self.record(1, key: "b"))
        _ = scheduler.receive(Self.record(2, key: "a"))
        let r33 = scheduler.stop()
        #expect(r33 == 2)
        let r34 = scheduler.abandon([Self.record(0, key: "a")])
        #expect(r34.isEmpty)
        #expect(scheduler.tracker.committable == nil)
        #expect(scheduler.running == 0)
        let r35 = scheduler.receive(Self.record(3, key: "c"))
        #expect(r35.isEmpty)
    }

    @Test func pausesAtTheThresholdAndResumesAtHalf() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 2), pauseThreshold: 4)
        var changes: [PartitionScheduler.FlowChange?] = []
        for offset in 0..<4 {
            _ = scheduler.receive(Self.record(Int64(offset), key: "k\(offset)"))
            changes.append(scheduler.flowChange())
        }
        #expect(changes == [nil, nil, nil, .pause])
        var running = [Self.record(0, key: "k0"), Self.record(1, key: "k1")]
        let next = scheduler.finish([running.removeFirst()]).next
        let r36 = scheduler.flowChange()  // 3 pending
        #expect(r36 == nil)
        running += next
        _ = scheduler.finish([running.removeFirst()])
        let r37 = scheduler.flowChange()  // 2 pending
        #expect(r37 == .resume)
    }
}
