import Kafka
import Testing

@testable import DispatcherCore

/// Decisions of retry parking without I/O: the cap on a partition's uncommitted span, where a
/// waiting notification waits, and when a request with parked notifications completes.
@Suite struct UncommittedSpanCapTests {
    static func record(_ offset: Int64, key: String? = nil) -> KafkaMessage {
        PartitionSchedulerTests.record(offset, key: key)
    }

    @Test func recordsPastTheCapAreHeldOutsideTheSpanUntilThePrefixMoves() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 100), pauseThreshold: 1_000, maxUncommitted: 3)
        var started: [Int64] = []
        for offset in 0..<6 { started += scheduler.receive(Self.record(Int64(offset), key: "k\(offset)")).map(\.offset.rawValue) }
        #expect(started == [0, 1, 2])
        #expect(scheduler.uncommitted == 3)
        #expect(scheduler.atCap)
        #expect(scheduler.pending == 6)
        // Held records pause fetching even below the pause threshold.
        #expect(scheduler.flowChange() == .pause)
        // 1 and 2 finish: the prefix does not move (0 still runs), nothing is admitted.
        _ = scheduler.finish([Self.record(1, key: "k1")])
        _ = scheduler.finish([Self.record(2, key: "k2")])
        #expect(scheduler.takeStartable().isEmpty)
        #expect(scheduler.uncommitted == 3)
        // 0 finishes: the span empties and the three held records join it, all startable at once.
        let done = scheduler.finish([Self.record(0, key: "k0")])
        #expect(done.store == 3)
        let more = scheduler.takeStartable()
        #expect((done.next + more.flatMap { $0 }).map(\.offset.rawValue).sorted() == [3, 4, 5])
        #expect(scheduler.uncommitted == 3)
        #expect(scheduler.flowChange() == .resume)
    }

    @Test func theSpanNeverExceedsTheCapWhateverTheFinishOrder() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let cap = Int.random(in: 1...20, using: &generator)
            var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: Int.random(in: 1...8, using: &generator)), pauseThreshold: 10_000, maxUncommitted: cap)
            var running: [KafkaMessage] = []
            var nextOffset: Int64 = 0
            var finished = 0
            while finished < 300 {
                if Bool.random(using: &generator), nextOffset < 300 {
                    running += scheduler.receive(Self.record(nextOffset, key: "k\(Int.random(in: 0..<5, using: &generator))"))
                    nextOffset += 1
                } else if !running.isEmpty {
                    let record = running.remove(at: Int.random(in: 0..<running.count, using: &generator))
                    running += scheduler.finish([record]).next
                    running += scheduler.takeStartable().flatMap { $0 }
                    finished += 1
                } else if nextOffset >= 300 {
                    break
                }
                #expect(scheduler.uncommitted <= cap)
            }
            #expect(scheduler.tracker.committable?.rawValue == nextOffset || nextOffset == 0)
        }
    }

    @Test func heldRecordsOfTheSameKeyKeepOffsetOrder() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 100), pauseThreshold: 1_000, maxUncommitted: 1)
        let first = scheduler.receive(Self.record(0, key: "r"))
        #expect(first.map(\.offset) == [0])
        #expect(scheduler.receive(Self.record(1, key: "r")).isEmpty)
        #expect(scheduler.receive(Self.record(2, key: "r")).isEmpty)
        let a = scheduler.finish(first)
        let aNext = a.next + scheduler.takeStartable().flatMap { $0 }
        #expect(aNext.map(\.offset) == [1])
        let b = scheduler.finish(aNext)
        let bNext = b.next + scheduler.takeStartable().flatMap { $0 }
        #expect(bNext.map(\.offset) == [2])
        #expect(scheduler.finish(bNext).store == 3)
    }

    @Test func stopDropsHeldRecordsAndAReReadIsDetectedPastHeldOffsets() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 100), pauseThreshold: 1_000, maxUncommitted: 1)
        _ = scheduler.receive(Self.record(0))
        _ = scheduler.receive(Self.record(1))
        _ = scheduler.receive(Self.record(2))
        #expect(!scheduler.accepts(2))
        #expect(!scheduler.accepts(1))
        #expect(scheduler.accepts(3))
        #expect(scheduler.stop() == 2)
        #expect(scheduler.pending == 1)
    }

    @Test func orderedModeAdmitsHeldEventsAsTheNextBatch() {
        var scheduler = PartitionScheduler(mode: .ordered(batchSize: 10), pauseThreshold: 1_000, maxUncommitted: 2)
        let batch = scheduler.receive(Self.record(0))
        #expect(batch.map(\.offset) == [0])
        _ = scheduler.receive(Self.record(1))
        _ = scheduler.receive(Self.record(2))
        _ = scheduler.receive(Self.record(3))
        #expect(scheduler.uncommitted == 2)
        let done = scheduler.finish(batch)
        #expect(done.next.map(\.offset) == [1, 2])
        #expect(scheduler.takeStartable().isEmpty)
        let second = scheduler.finish(done.next)
        #expect(second.next.map(\.offset) == [3])
    }
}

@Suite struct RetryParkingPolicyTests {
    let policy = RetryParkingPolicy(maxUncommittedRecords: 100, maxUncommittedAge: .seconds(60))

    @Test func waitsOnATimerWhileTheSpanHasRoomAndTheRecordStaysYoung() {
        #expect(policy.decide(uncommittedRecords: 99, recordAge: .seconds(10), delay: .seconds(50)) == .waitOnTimer)
        #expect(policy.decide(uncommittedRecords: 0, recordAge: .zero, delay: .milliseconds(200)) == .waitOnTimer)
    }

    @Test func parksWhenTheSpanIsFull() {
        #expect(policy.decide(uncommittedRecords: 100, recordAge: .zero, delay: .milliseconds(1)) == .park(.spanFull))
        #expect(policy.decide(uncommittedRecords: 150, recordAge: .seconds(90), delay: .seconds(1)) == .park(.spanFull))
    }

    @Test func parksWhenTheWaitWouldOutliveTheAgeCap() {
        #expect(policy.decide(uncommittedRecords: 1, recordAge: .seconds(10), delay: .seconds(51)) == .park(.ageCap))
        #expect(policy.decide(uncommittedRecords: 1, recordAge: .seconds(61), delay: .zero) == .park(.ageCap))
        #expect(policy.decide(uncommittedRecords: 1, recordAge: .seconds(10), delay: .seconds(50)) == .waitOnTimer)
    }
}

@Suite struct ParkedRequestCompletionTests {
    @Test func completeOnlyOnceTheRecordIsDoneAndNothingIsParked() {
        #expect(!ParkedRequestCompletion(recordDone: false, parkedRemaining: 0).isComplete)
        #expect(!ParkedRequestCompletion(recordDone: true, parkedRemaining: 1).isComplete)
        #expect(!ParkedRequestCompletion(recordDone: false, parkedRemaining: 3).isComplete)
        #expect(ParkedRequestCompletion(recordDone: true, parkedRemaining: 0).isComplete)
    }

    @Test func countsComeFromTheRecordedOutcomes() {
        let counts = ParkedRequestCompletion.counts(["DELIVERED": 7, "FAILED": 2, "SKIPPED": 1, "REJECTED": 3, "DELIVERY_OUTCOME_UNSPECIFIED": 1])
        #expect(counts.total == 14)
        #expect(counts.delivered == 7)
        #expect(counts.failed == 2)
        #expect(counts.skipped == 1)
        #expect(counts.rejected == 3)
    }
}
