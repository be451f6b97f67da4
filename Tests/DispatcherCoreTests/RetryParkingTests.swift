import Kafka
import Synchronization
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

@Suite struct WaitingRecordSlotTests {
    static func record(_ offset: Int64, key: String? = nil) -> KafkaMessage {
        PartitionSchedulerTests.record(offset, key: key)
    }

    @Test func aRecordThatOnlyWaitsGivesItsSlotToTheNextRecord() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 2), pauseThreshold: 1_000)
        let a = scheduler.receive(Self.record(0, key: "a")), b = scheduler.receive(Self.record(1, key: "b"))
        #expect(a.count == 1 && b.count == 1)
        #expect(scheduler.receive(Self.record(2, key: "c")).isEmpty)
        #expect(scheduler.receive(Self.record(3, key: "d")).isEmpty)
        // Both running records wait for APNs retries: 2 and 3 start in their slots.
        #expect(scheduler.recordWaits(Self.record(0, key: "a")).flatMap { $0 }.map(\.offset) == [2])
        #expect(scheduler.recordWaits(Self.record(1, key: "b")).flatMap { $0 }.map(\.offset) == [3])
        #expect(scheduler.recordWaits(Self.record(1, key: "b")).isEmpty)  // reported twice: no second slot
        #expect(scheduler.pending == 4)
        // 0 sends again (over the budget for a moment), then finishes; 1 finishes while waiting.
        scheduler.recordResumes(Self.record(0, key: "a"))
        #expect(scheduler.running == 3)
        _ = scheduler.finish([Self.record(0, key: "a")])
        _ = scheduler.finish([Self.record(1, key: "b")])
        #expect(scheduler.running == 2)
        _ = scheduler.finish([Self.record(2, key: "c")])
        let last = scheduler.finish([Self.record(3, key: "d")])
        #expect(last.store == 4)
        #expect(scheduler.pending == 0 && scheduler.running == 0)
    }

    @Test func aWaitingRecordStillHoldsItsKey() {
        var scheduler = PartitionScheduler(mode: .parallel(maxInFlight: 1), pauseThreshold: 1_000)
        _ = scheduler.receive(Self.record(0, key: "same"))
        #expect(scheduler.receive(Self.record(1, key: "same")).isEmpty)
        #expect(scheduler.recordWaits(Self.record(0, key: "same")).isEmpty)  // its successor must wait for it
        let done = scheduler.finish([Self.record(0, key: "same")])
        #expect(done.next.map(\.offset) == [1])
    }
}

@Suite struct RecordActivityTests {
    @Test func aRequestWaitsOnlyWhenEveryNotificationInFlightWaitsAndNoneIsLeftToStart() {
        let transitions = Mutex<[String]>([])
        var context = RetryContext.unbounded()
        context.recordWaits = { transitions.withLock { $0.append("waits") } }
        context.recordResumes = { transitions.withLock { $0.append("resumes") } }
        let activity = RecordActivity(context)
        activity.notificationStarted()
        activity.notificationStarted()
        activity.beginWait()
        activity.beginWait()  // both wait, but more may start: still busy
        #expect(transitions.withLock { $0 }.isEmpty)
        activity.startingDone()
        #expect(transitions.withLock { $0 } == ["waits"])
        activity.endWait()  // one sends again
        #expect(transitions.withLock { $0 } == ["waits", "resumes"])
        activity.notificationEnded()  // it settled; the other still waits
        #expect(transitions.withLock { $0 } == ["waits", "resumes", "waits"])
        activity.endWait()
        activity.notificationEnded()
        #expect(transitions.withLock { $0 } == ["waits", "resumes", "waits", "resumes"])
    }
}
