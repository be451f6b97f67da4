import Kafka
import ServiceCore
import Synchronization
import Testing

@testable import DispatcherCore

/// The hot-path waiter without APNs: a waiting notification gives its budget permit back, gets one
/// again before it sends, and parks when its partition's span is full — at once, or woken early.
@Suite(.timeLimit(.minutes(1)))
struct RetryWaiterTests {
    static let partition = KafkaTopicPartition(topic: "push.send-requests.v1", partition: 3)

    static func context(_ timers: RetryTimers, uncommitted: @escaping @Sendable () -> Int, maxRecords: Int = 10) -> RetryContext {
        RetryContext(partition: partition, recordStartedAt: .now, uncommittedRecords: uncommitted,
                     policy: RetryParkingPolicy(maxUncommittedRecords: maxRecords, maxUncommittedAge: .seconds(60)), timers: timers)
    }

    /// Waits until `condition` holds, for at most 10 s.
    static func eventually(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw TestFailure("condition not met within 10 s") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    struct TestFailure: Error { let text: String; init(_ text: String) { self.text = text } }

    @Test func aWaitingNotificationHoldsNoPermitAndGetsOneBackBeforeSending() async throws {
        let budget = AsyncSemaphore(permits: 1)
        let permit = NotificationPermit(budget)
        try await permit.acquire()
        let parked = Mutex(0)
        let waiter = HotPathRetryWaiter(permit: permit, context: Self.context(RetryTimers(), uncommitted: { 1 }), logger: Logger(label: "test")) { _, _, _ in
            parked.withLock { $0 += 1 }
        }
        let waiting = Task { try await waiter.wait(.milliseconds(300), attemptsSoFar: 1, reason: .tooManyRequests) }
        // While it waits, another notification takes the only permit.
        try await Self.eventually { budget.availablePermits == 1 }
        try await budget.acquire()
        // The timer fires (300 ms), and the waiter queues behind the other notification's permit.
        try await Self.eventually { budget.queuedWaiters == 1 }
        #expect(budget.availablePermits == 0)
        budget.release()
        try await waiting.value
        #expect(budget.availablePermits == 0)
        permit.release()
        permit.release()  // at most once
        #expect(budget.availablePermits == 1)
        #expect(parked.withLock { $0 } == 0)
    }

    /// In line for a device token's gate (APNsDeviceGates), a notification holds no budget permit and
    /// gets one back before it sends.
    @Test func waitingForADeviceGateHoldsNoPermit() async throws {
        let budget = AsyncSemaphore(permits: 1)
        let permit = NotificationPermit(budget)
        try await permit.acquire()
        let waiter = HotPathRetryWaiter(permit: permit, context: Self.context(RetryTimers(), uncommitted: { 1 }), logger: Logger(label: "test")) { _, _, _ in }
        let gate = AsyncSemaphore(permits: 1)
        try await gate.acquire()  // the gate's slot is someone else's
        let waiting = Task { try await waiter.waitForDeviceGate(attemptsSoFar: 1) { try await gate.acquire(); return 7 } }
        try await Self.eventually { budget.availablePermits == 1 }
        gate.release()
        #expect(try await waiting.value == 7)
        #expect(budget.availablePermits == 0, "the permit is taken again before sending")
        permit.release()
    }

    /// In line for a device gate when its partition fills (or stops), a notification leaves the line
    /// and is parked, due at once, holding no permit.
    @Test func waitingForADeviceGateIsWokenToPark() async throws {
        let timers = RetryTimers()
        let budget = AsyncSemaphore(permits: 1)
        let permit = NotificationPermit(budget)
        try await permit.acquire()
        let parkedDelays = Mutex<[Duration]>([])
        let waiter = HotPathRetryWaiter(permit: permit, context: Self.context(timers, uncommitted: { 1 }), logger: Logger(label: "test")) { delay, _, _ in
            parkedDelays.withLock { $0.append(delay) }
        }
        let gate = AsyncSemaphore(permits: 1)
        try await gate.acquire()  // nobody ever hands this notification the slot
        let waiting = Task { try await waiter.waitForDeviceGate(attemptsSoFar: 1) { try await gate.acquire(); return 1 } }
        try await Self.eventually { timers.waiting == 1 }
        #expect(timers.parkAll(of: Self.partition) == 1)
        await #expect(throws: WaiterEndedSend.self) { try await waiting.value }
        #expect(parkedDelays.withLock { $0 } == [.zero])
        #expect(gate.queuedWaiters == 0, "it left the line")
        #expect(budget.availablePermits == 1)
    }

    @Test func parksAtOnceWhenTheSpanIsFull() async throws {
        let budget = AsyncSemaphore(permits: 1)
        let permit = NotificationPermit(budget)
        try await permit.acquire()
        let parked = Mutex<[Duration]>([])
        let waiter = HotPathRetryWaiter(permit: permit, context: Self.context(RetryTimers(), uncommitted: { 10 }), logger: Logger(label: "test")) { delay, _, _ in
            parked.withLock { $0.append(delay) }
        }
        await #expect(throws: WaiterEndedSend.self) { try await waiter.wait(.seconds(30), attemptsSoFar: 2, reason: .serverError(status: 503)) }
        #expect(parked.withLock { $0 } == [.seconds(30)])
    }

    @Test func aWaitingNotificationIsWokenToParkWhenItsPartitionFills() async throws {
        let timers = RetryTimers()
        let budget = AsyncSemaphore(permits: 2)
        let parkedDelays = Mutex<[Duration]>([])
        var tasks: [Task<Void, any Error>] = []
        for _ in 0..<2 {
            let permit = NotificationPermit(budget)
            try await permit.acquire()
            let waiter = HotPathRetryWaiter(permit: permit, context: Self.context(timers, uncommitted: { 1 }), logger: Logger(label: "test")) { delay, _, _ in
                parkedDelays.withLock { $0.append(delay) }
            }
            tasks.append(Task { try await waiter.wait(.seconds(50), attemptsSoFar: 1, reason: .streamTimeout) })
        }
        try await Self.eventually { timers.waiting == 2 }
        // Another partition filling up wakes nobody here.
        #expect(timers.parkAll(of: KafkaTopicPartition(topic: "push.send-requests.v1", partition: 4)) == 0)
        let started = ContinuousClock.now
        #expect(timers.parkAll(of: Self.partition) == 2)
        for task in tasks { await #expect(throws: WaiterEndedSend.self) { try await task.value } }
        #expect(started.duration(to: .now) < .seconds(5))
        // Parked with the rest of their delay, not a new one.
        #expect(parkedDelays.withLock { $0 }.allSatisfy { $0 > .seconds(40) && $0 <= .seconds(50) })
        #expect(budget.availablePermits == 2)
        #expect(timers.waiting == 0)
    }

    @Test func aWaitLongerThanTheAgeCapParksAtOnce() async throws {
        let parked = Mutex(0)
        let permit = NotificationPermit(AsyncSemaphore(permits: 1))
        try await permit.acquire()
        let waiter = HotPathRetryWaiter(permit: permit, context: Self.context(RetryTimers(), uncommitted: { 0 }), logger: Logger(label: "test")) { _, _, _ in
            parked.withLock { $0 += 1 }
        }
        await #expect(throws: WaiterEndedSend.self) { try await waiter.wait(.seconds(61), attemptsSoFar: 1, reason: .tooManyRequests) }
        #expect(parked.withLock { $0 } == 1)
    }

    @Test func cancellingAWaitingNotificationEndsItsWait() async throws {
        let timers = RetryTimers()
        let permit = NotificationPermit(AsyncSemaphore(permits: 1))
        try await permit.acquire()
        let waiter = HotPathRetryWaiter(permit: permit, context: Self.context(timers, uncommitted: { 0 }), logger: Logger(label: "test")) { _, _, _ in }
        let task = Task { try await waiter.wait(.seconds(50), attemptsSoFar: 1, reason: .connectionFailure) }
        try await Self.eventually { timers.waiting == 1 }
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(timers.waiting == 0)
    }
}
