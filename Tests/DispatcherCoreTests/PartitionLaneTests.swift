import Kafka
import Synchronization
import Testing

@testable import DispatcherCore

/// The per-partition queue between the consumer and a partition's worker.
@Suite(.timeLimit(.minutes(1)))
struct PartitionLaneTests {
    static func record(_ offset: Int64) -> KafkaMessage {
        KafkaMessage(topic: "t", partition: 0, offset: KafkaOffset(rawValue: offset), key: nil, value: [], headers: [], timestamp: nil)
    }

    @Test func recordsComeOutInOrderAndAFullLaneHoldsThePusherBack() async throws {
        let lane = PartitionLane(capacity: 2)
        let pushed = Atomic<Int>(0)
        let pusher = Task {
            for offset in 0..<5 {
                await lane.push(Self.record(Int64(offset)))
                pushed.add(1, ordering: .relaxed)
            }
        }
        // With nobody taking records, the pusher stops once two are queued: the push that filled
        // the lane waits for room, so the consumer stops pulling records.
        try await Task.sleep(for: .milliseconds(200))
        #expect(pushed.load(ordering: .relaxed) == 1)
        var offsets: [Int64] = []
        for _ in 0..<5 {
            let message = try #require(await lane.next())
            #expect(lane.isBusy)
            offsets.append(message.offset.rawValue)
            lane.done()
        }
        await pusher.value
        #expect(offsets == [0, 1, 2, 3, 4])
        #expect(!lane.isBusy)
    }

    @Test func revokedRecordsAreDroppedAndTheWorkerEnds() async throws {
        let lane = PartitionLane(capacity: 10)
        for offset in 0..<3 { await lane.push(Self.record(Int64(offset))) }
        #expect(await lane.next()?.offset.rawValue == 0)
        lane.dropQueued()
        lane.finish()
        lane.done()
        #expect(await lane.next() == nil)
        // A worker waiting on an empty lane is woken by finish().
        let idle = PartitionLane(capacity: 1)
        let waiter = Task { await idle.next() }
        try await Task.sleep(for: .milliseconds(50))
        idle.finish()
        #expect(await waiter.value == nil)
    }
}
