import Kafka
import Testing

@testable import DispatcherCore

/// The engine's decisions without Kafka: the offset tracker and the partition scheduler.
@Suite struct OffsetTrackerTests {
    @Test func outOfOrderFinishesCommitOnlyTheFinishedPrefix() {
        var tracker = OffsetTracker()
        for offset in 0..<5 { tracker.start(KafkaOffset(rawValue: Int64(offset))) }
        #expect(tracker.finish(2) == nil)
        #expect(tracker.finish(1) == nil)
        #expect(tracker.committable == nil)
        #expect(tracker.finish(0) == 3)
        #expect(tracker.uncommitted == 2)
        #expect(tracker.oldestUnfinished == 3)
        #expect(tracker.finish(4) == nil)
        #expect(tracker.finish(3) == 5)
        #expect(tracker.uncommitted == 0)
        #expect(tracker.oldestUnfinished == nil)
    }

    @Test func gapsInOffsetsAreSkipped() {
        var tracker = OffsetTracker()
        tracker.start(10)
        tracker.start(13)  // 11 and 12 were transaction markers
        tracker.start(20)
        #expect(tracker.finish(13) == nil)
        #expect(tracker.finish(10) == 14)
        #expect(tracker.finish(20) == 21)
    }

    @Test func repeatsUnknownAndOutOfOrderStartsChangeNothing() {
        var tracker = OffsetTracker()
        #expect(tracker.start(5))
        #expect(!tracker.start(5))
        #expect(!tracker.start(4))
        #expect(tracker.finish(7) == nil)
        #expect(tracker.finish(5) == 6)
        #expect(tracker.finish(5) == nil)
        #expect(!tracker.start(3))
        #expect(tracker.committable == 6)
    }

    @Test func abandonedRecordsNeverMoveTheOffset() {
        var tracker = OffsetTracker()
        for offset in 0..<4 { tracker.start(KafkaOffset(rawValue: Int64(offset))) }
        tracker.finish(0)
        tracker.finish(2)
        tracker.abandonUnfinished()  // revocation: 1 and 3 are left for the next owner
        #expect(tracker.committable == 1)
        #expect(tracker.finish(3) == nil)
        #expect(tracker.finish(1) == nil)
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
        #expect(scheduler.receive(Self.record(0, key: "a")).map(\.offset) == [0])
        #expect(scheduler.receive(Self.record(1, key: "b")).map(\.offset) == [1])
        #expect(scheduler.receive(Self.record(2, key: "c")).isEmpty)  // budget full: waits
        let (store, next) = scheduler.finish([Self.record(1, key: "b")])
        #expect(store == nil)  // 0 still runs
        #expect(next.map(\.offset) == [2])
        let done = scheduler.finish([Self.record(0, key: "a")])
        #expect(done.store == 2)
        #expect(done.next.isEmpty)
        #expect(scheduler.finish([Self.record(2, key: "c")]).store == 3)
        #expect(scheduler.pending == 0)
    }

    @Test func sameKeyRunsInOffsetOrderWhileOtherKeysOvertake() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 10), pauseThreshold: 100)
        #expect(scheduler.receive(Self.record(0, key: "r1")).map(\.offset) == [0])
        #expect(scheduler.receive(Self.record(1, key: "r1")).isEmpty)
        #expect(scheduler.receive(Self.record(2, key: "r1")).isEmpty)
        #expect(scheduler.receive(Self.record(3, key: "r2")).map(\.offset) == [3])
        #expect(scheduler.finish([Self.record(3, key: "r2")]).store == nil)
        let first = scheduler.finish([Self.record(0, key: "r1")])
        #expect(first.store == 1)
        #expect(first.next.map(\.offset) == [1])
        let second = scheduler.finish(first.next)
        #expect(second.next.map(\.offset) == [2])
        #expect(scheduler.finish(second.next).store == 4)
    }

    @Test func aFreedSuccessorStartsBeforeNewerQueuedRecords() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 1), pauseThreshold: 100)
        _ = scheduler.receive(Self.record(0, key: "a"))
        _ = scheduler.receive(Self.record(1, key: "a"))
        _ = scheduler.receive(Self.record(2, key: "b"))
        // 1 became startable when 0 finished and is older than 2.
        #expect(scheduler.finish([Self.record(0, key: "a")]).next.map(\.offset) == [1])
        #expect(scheduler.finish([Self.record(1, key: "a")]).next.map(\.offset) == [2])
    }

    @Test func recordsWithoutKeyHaveNoOrder() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 5), pauseThreshold: 100)
        #expect(scheduler.receive(Self.record(0)).count == 1)
        #expect(scheduler.receive(Self.record(1)).count == 1)
    }

    @Test func orderedModeRunsOneBatchAtATime() {
        var scheduler = PartitionScheduler(mode: .ordered(batchSize: 3), pauseThreshold: 100)
        #expect(scheduler.receive(Self.record(0)).map(\.offset) == [0])
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
        #expect(scheduler.stop() == 2)
        #expect(scheduler.abandon([Self.record(0, key: "a")]).isEmpty)
        #expect(scheduler.tracker.committable == nil)
        #expect(scheduler.running == 0)
        #expect(scheduler.receive(Self.record(3, key: "c")).isEmpty)
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
        #expect(scheduler.flowChange() == nil)  // 3 pending
        running += next
        _ = scheduler.finish([running.removeFirst()])
        #expect(scheduler.flowChange() == .resume)  // 2 pending
    }
}
