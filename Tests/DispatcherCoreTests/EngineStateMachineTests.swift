import Kafka
import Testing

@testable import DispatcherCore

/// The engine's decisions without Kafka, PostgreSQL or APNs (docs/dispatcher-engine.md "Decisions as
/// values"): the in-flight budget in records and bytes, pausing, revocation against a lost
/// assignment, the stop, and who is woken when.
@Suite struct EngineStateMachineTests {
    typealias Machine = EngineStateMachine

    static let requests = "push.send-requests.v1"
    static let events = "push.token-events.v1"

    static func settings(_ change: (inout Machine.Settings) -> Void = { _ in }) -> Machine.Settings {
        var settings = Machine.Settings(orderedTopic: events)
        change(&settings)
        return settings
    }

    static func record(_ offset: Int64, partition: Int32 = 0, key: String? = nil, bytes: Int = 0, topic: String = requests) -> KafkaMessage {
        KafkaMessage(
            topic: topic, partition: KafkaPartition(rawValue: partition), offset: KafkaOffset(rawValue: offset),
            key: key.map { Array($0.utf8) }, value: [UInt8](repeating: 7, count: bytes), headers: [], timestamp: nil)
    }

    /// Finishes the worker's records; the offsets stored are appended to `stored`.
    static func finish(
        _ machine: inout Machine, _ worker: Machine.WorkerSpawn, finished: Bool = true, cancelled: Bool = false,
        stored: inout [Int64], assigned: Bool = true
    ) -> Machine.WorkerStep {
        machine.workerFinished(worker, records: worker.records, finished: finished, cancelled: cancelled) { offset in
            stored.append(offset.rawValue)
            return assigned
        }
    }

    @Test func theBudgetCountsRecordsAndTheIntakeIsWokenWhenOneFinishes() throws {
        var machine = Machine(settings: Self.settings { $0.maxInFlightRecords = 2 })
        let first = try #require(machine.recordReceived(Self.record(0, key: "a")).spawns.first)
        _ = machine.recordReceived(Self.record(1, key: "b"))
        #expect(machine.pendingRecords == 2)
        #expect(!machine.hasRoom(forBytes: 0))
        let check1 = machine.intakeNeedsRoom(forBytes: 0)
        #expect(check1)
        var stored: [Int64] = []
        let step = Self.finish(&machine, first, stored: &stored)
        #expect(step.resumeIntake)
        #expect(stored == [1])
        #expect(machine.hasRoom(forBytes: 0))
    }

    @Test func theBudgetCountsBytesAndARecordLargerThanAllOfItIsTakenWhenNothingElseIs() throws {
        var machine = Machine(settings: Self.settings { $0.maxInFlightRecordBytes = 100 })
        #expect(machine.hasRoom(forBytes: 60))
        let first = try #require(machine.recordReceived(Self.record(0, key: "a", bytes: 58)).spawns.first)
        #expect(machine.pendingBytes == 59)  // key and value
        #expect(machine.hasRoom(forBytes: 41))
        #expect(!machine.hasRoom(forBytes: 42))
        let check2 = machine.intakeNeedsRoom(forBytes: 60)
        #expect(check2)
        var stored: [Int64] = []
        #expect(Self.finish(&machine, first, stored: &stored).resumeIntake)
        #expect(machine.pendingBytes == 0)
        // Larger than the whole budget: taken when nothing else is in flight (never a deadlock), and
        // then nothing else fits beside it.
        #expect(machine.hasRoom(forBytes: 1_000))
        let large = try #require(machine.recordReceived(Self.record(1, key: "b", bytes: 999)).spawns.first)
        #expect(!machine.hasRoom(forBytes: 1))
        let check3 = machine.intakeNeedsRoom(forBytes: 1)
        #expect(check3)
        #expect(Self.finish(&machine, large, stored: &stored).resumeIntake)
        #expect(stored == [1, 2])
    }

    @Test func recordsDroppedByAStopOrARevocationGiveTheirBytesBack() throws {
        var machine = Machine(settings: Self.settings { $0.maxInFlightPerPartition = 1 })
        let running = try #require(machine.recordReceived(Self.record(0, key: "a", bytes: 9)).spawns.first)
        _ = machine.recordReceived(Self.record(1, key: "a", bytes: 9))  // behind its key
        _ = machine.recordReceived(Self.record(2, key: "b", bytes: 9))  // queued
        #expect(machine.pendingBytes == 30)
        _ = machine.partitionsRevoked([running.partition], lost: false)
        #expect(machine.pendingBytes == 10)
        var stored: [Int64] = []
        let step = Self.finish(&machine, running, stored: &stored)
        #expect(step.next.isEmpty && step.spawns.isEmpty)
        #expect(machine.pendingBytes == 0 && machine.pendingRecords == 0)
        #expect(stored == [1])  // the finished prefix is stored during the drain
    }

    @Test func aPartitionPausesAtItsThresholdAndResumesAtHalf() throws {
        var machine = Machine(settings: Self.settings {
            $0.maxInFlightPerPartition = 4
            $0.pauseThresholdPerPartition = 4
        })
        var workers: [Machine.WorkerSpawn] = []
        for offset in 0..<4 {
            let received = machine.recordReceived(Self.record(Int64(offset), key: "k\(offset)"))
            workers += received.spawns
            #expect(received.flow == (offset == 3 ? .pause : nil))
        }
        var stored: [Int64] = []
        #expect(Self.finish(&machine, workers[0], stored: &stored).flow == nil)
        #expect(Self.finish(&machine, workers[1], stored: &stored).flow == .resume)
        #expect(stored == [1, 2])
    }

    @Test func aRevocationIsDrainedAndCancelsWhatOutlivesIt() throws {
        var machine = Machine(settings: Self.settings())
        let worker = try #require(machine.recordReceived(Self.record(0, key: "a")).spawns.first)
        let retrying = try #require(machine.recordReceived(Self.record(0, partition: 1, key: "b")).spawns.first)
        machine.workerRetrying(retrying.id, true)
        let revoked: Set = [worker.partition, retrying.partition]
        let revocation = machine.partitionsRevoked(revoked, lost: false)
        #expect(revocation.drain)
        #expect(revocation.cancel == [retrying.id])  // waiting out a retry: abandoned at once
        #expect(machine.isAbandoned(worker))
        #expect(machine.uncommittedRecords(of: worker) == .max)  // park at once
        let check4 = machine.recordReceived(Self.record(1, key: "c")).spawns.isEmpty
        #expect(check4)  // starts nothing
        let waiter = machine.makeID()
        let check5 = machine.waitForIdle(waiter, partitions: revoked)
        #expect(check5)
        // The drain is over with the first worker still running: it is cancelled.
        let ended = machine.revocationEnded(revoked, drained: false)
        #expect(Set(ended.cancel) == [worker.id, retrying.id])
        #expect(machine.workerGone(worker.id))
        var stored: [Int64] = []
        #expect(Self.finish(&machine, retrying, finished: false, cancelled: true, stored: &stored).idleWaitersWoken.isEmpty)
        #expect(Self.finish(&machine, worker, finished: false, cancelled: true, stored: &stored).idleWaitersWoken == [waiter])
        #expect(stored.isEmpty)
    }

    @Test func aLostAssignmentIsNotWaitedForCancelsNoRunningRecordAndStoresNothing() throws {
        var machine = Machine(settings: Self.settings())
        let worker = try #require(machine.recordReceived(Self.record(5, key: "a")).spawns.first)
        let lost: Set = [worker.partition]
        let check6 = machine.assignmentLost(lost).isEmpty
        #expect(check6)
        #expect(machine.isAbandoned(worker))  // no new notification starts
        let ended = machine.revocationEnded(lost, drained: true)
        #expect(ended.cancel.isEmpty)
        #expect(!machine.workerGone(worker.id))  // the send in flight finishes
        var stored: [Int64] = []
        let step = Self.finish(&machine, worker, stored: &stored)
        #expect(step.next.isEmpty)
        #expect(stored.isEmpty)
        // Assigned back and read again from the last commit: a new generation, the old one ignored.
        let again = try #require(machine.recordReceived(Self.record(5, key: "a")).spawns.first)
        #expect(again.generation != worker.generation)
        #expect(!machine.isAbandoned(again))
    }

    /// Records dropped with their partition free room: the intake waiting for it goes on, without
    /// waiting for a worker to finish.
    @Test func aRevocationThatFreesRoomWakesTheWaitingIntake() throws {
        var machine = Machine(settings: Self.settings {
            $0.maxInFlightPerPartition = 1
            $0.maxInFlightRecords = 2
        })
        let worker = try #require(machine.recordReceived(Self.record(0, key: "a")).spawns.first)
        _ = machine.recordReceived(Self.record(1, key: "b"))
        let waits = machine.intakeNeedsRoom(forBytes: 0)
        #expect(waits)
        let revoked: Set = [worker.partition]
        #expect(machine.partitionsRevoked(revoked, lost: false).drain)
        // The drain is over, the worker still runs: its partition's records are dropped with it.
        let ended = machine.revocationEnded(revoked, drained: false)
        #expect(ended.resumeIntake)
        #expect(ended.cancel == [worker.id])
        #expect(machine.pendingRecords == 0)
    }

    /// The consumer may hand out a record again within one assignment (librdkafka did after a fetch
    /// was paused and resumed: one older record, then on from where it was). Every record taken stays
    /// queued and runs once; the repeat starts nothing; the stored offset covers every record. The
    /// engine once started the partition over on such a record, dropping the records queued behind it
    /// while the consumer went on past them: they were committed without ever running.
    @Test(arguments: [requests, events])
    func aRecordHandedOutAgainIsIgnoredAndNothingTakenIsDropped(topic: String) throws {
        var machine = Machine(settings: Self.settings {
            $0.maxInFlightPerPartition = 1
            $0.tokenEventBatchSize = 1
        })
        var ran: [Int64] = []
        var stored: [Int64] = []
        var queue: [Machine.WorkerSpawn] = []
        for offset: Int64 in 10...14 {
            queue += machine.recordReceived(Self.record(offset, key: "k\(offset)", topic: topic)).spawns
        }
        #expect(queue.count == 1 && machine.pendingRecords == 5)
        // Handed out again: one running (10), one queued (12), one older than anything taken (3).
        for offset: Int64 in [10, 12, 3] {
            let again = machine.recordReceived(Self.record(offset, key: "k\(offset)", topic: topic))
            #expect(again.repeated, "offset \(offset)")
            #expect(again.spawns.isEmpty && again.flow == nil, "offset \(offset)")
        }
        #expect(machine.pendingRecords == 5)
        queue += machine.recordReceived(Self.record(15, key: "k15", topic: topic)).spawns
        while !queue.isEmpty {
            var worker = queue.removeFirst()
            while true {
                ran += worker.records.map(\.offset.rawValue)
                let step = Self.finish(&machine, worker, stored: &stored)
                queue += step.spawns
                if step.next.isEmpty { break }
                worker.records = step.next
            }
        }
        #expect(ran.sorted() == Array(10...15))
        #expect(stored.last == 16)
        #expect(machine.pendingRecords == 0)
    }

    /// A partition assigned again after its revocation ended starts over from the offset the consumer
    /// reads first (the last commit), however old: a new generation.
    @Test func aPartitionAssignedAgainStartsOverFromItsFirstRecord() throws {
        var machine = Machine(settings: Self.settings())
        let old = try #require(machine.recordReceived(Self.record(7, key: "a")).spawns.first)
        let revoked: Set = [old.partition]
        _ = machine.partitionsRevoked(revoked, lost: false)
        var stored: [Int64] = []
        _ = Self.finish(&machine, old, stored: &stored)
        _ = machine.revocationEnded(revoked, drained: true)
        let received = machine.recordReceived(Self.record(3, key: "a"))
        #expect(!received.repeated)
        let new = try #require(received.spawns.first)
        #expect(new.generation != old.generation)
        _ = Self.finish(&machine, new, stored: &stored)
        #expect(stored.last == 4)
    }

    @Test func aStopDropsQueuedRecordsCancelsRetryingWorkersAndTakesNothingMore() throws {
        var machine = Machine(settings: Self.settings {
            $0.maxInFlightPerPartition = 1
            $0.maxInFlightRecords = 2
        })
        let running = try #require(machine.recordReceived(Self.record(0, key: "a")).spawns.first)
        let retrying = try #require(machine.recordReceived(Self.record(0, partition: 1, key: "b")).spawns.first)
        machine.workerRetrying(retrying.id, true)
        let check7 = machine.intakeNeedsRoom(forBytes: 0)
        #expect(check7)
        machine.workerRetrying(running.id, false)
        _ = machine.recordReceived(Self.record(1, key: "c"))
        let stop = machine.stopRequested()
        #expect(stop.dropped == 1)
        #expect(stop.cancel == [retrying.id])
        #expect(stop.resumeIntake)
        let check8 = machine.recordReceived(Self.record(2, key: "d")).spawns.isEmpty
        #expect(check8)
        let check9 = !machine.intakeNeedsRoom(forBytes: .max)
        #expect(check9)
        #expect(machine.isAbandoned(running) && machine.uncommittedRecords(of: running) == .max)
        var stored: [Int64] = []
        let step = Self.finish(&machine, running, stored: &stored)
        #expect(step.next.isEmpty && step.spawns.isEmpty)
        #expect(stored == [1])  // what finishes during the stop is stored
    }

    @Test func idleWaitersAreWokenWhenTheLastWorkerOfTheirPartitionsEnds() throws {
        var machine = Machine(settings: Self.settings())
        let a = try #require(machine.recordReceived(Self.record(0, partition: 0, key: "a")).spawns.first)
        let b = try #require(machine.recordReceived(Self.record(0, partition: 1, key: "b")).spawns.first)
        let forA = machine.makeID(), forAll = machine.makeID(), gone = machine.makeID()
        let check10 = machine.waitForIdle(forA, partitions: [a.partition])
        #expect(check10)
        let check11 = machine.waitForIdle(forAll, partitions: nil)
        #expect(check11)
        let check12 = machine.waitForIdle(gone, partitions: nil)
        #expect(check12)
        let check13 = machine.stopWaitingForIdle(gone)
        #expect(check13)
        let check14 = !machine.stopWaitingForIdle(gone)
        #expect(check14)
        var stored: [Int64] = []
        #expect(Self.finish(&machine, a, stored: &stored).idleWaitersWoken == [forA])
        #expect(Self.finish(&machine, b, stored: &stored).idleWaitersWoken == [forAll])
        let check15 = !machine.waitForIdle(machine.makeID(), partitions: nil)
        #expect(check15)  // idle already
    }

    @Test func tokenEventsRunInOrderedBatchesAndAWaitingRequestGivesItsSlotUp() throws {
        var machine = Machine(settings: Self.settings {
            $0.tokenEventBatchSize = 2
            $0.maxInFlightPerPartition = 1
        })
        let batch = try #require(machine.recordReceived(Self.record(0, topic: Self.events)).spawns.first)
        let check16 = machine.recordReceived(Self.record(1, topic: Self.events)).spawns.isEmpty
        #expect(check16)
        var stored: [Int64] = []
        #expect(Self.finish(&machine, batch, stored: &stored).next.map(\.offset) == [1])
        let request = try #require(machine.recordReceived(Self.record(0, partition: 3, key: "a")).spawns.first)
        let check17 = machine.recordReceived(Self.record(1, partition: 3, key: "b")).spawns.isEmpty
        #expect(check17)
        let started = machine.recordWaits(request.records[0], of: request)
        #expect(started.map { $0.records.map(\.offset) } == [[1]])
        machine.recordResumes(request.records[0], of: request)
    }
}
