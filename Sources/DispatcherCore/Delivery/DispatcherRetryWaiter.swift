import APNs
import Kafka
import ServiceCore
import Synchronization

/// One permit of an in-flight budget (the process-wide budget, or the campaign lane), held by one
/// notification: taken by `InFlightBudgetPolicy` when the notification is admitted, released while
/// the notification waits for a retry, queued for again when the wait ends, and given back at most
/// once when the notification settles. A notification admitted without a budget holds none. Also a
/// report's place in `SendLogWriter`'s unmarked window (taken before its row is recorded, given back
/// once its mark was written).
final class NotificationPermit: Sendable {
    private let budget = Mutex<AsyncSemaphore?>(nil)
    private let held = Atomic<Bool>(false)

    /// A permit of no budget yet (`acquire(from:)` names it).
    init() {}

    /// A permit of `budget`, not held yet.
    convenience init(_ budget: AsyncSemaphore) {
        self.init()
        self.budget.withLock { $0 = budget }
    }

    /// Waits for a permit of `budget` (FIFO with every other notification) and keeps it.
    /// - Throws: `CancellationError`.
    func acquire(from budget: AsyncSemaphore) async throws {
        self.budget.withLock { $0 = budget }
        try await acquire()
    }

    /// Waits for a permit of this permit's budget again (none: returns at once).
    /// - Throws: `CancellationError`.
    func acquire() async throws {
        guard let budget = budget.withLock({ $0 }) else { return }
        try await budget.acquire()
        held.store(true, ordering: .sequentiallyConsistent)
    }

    /// Gives the permit back if held.
    func release() {
        if held.exchange(false, ordering: .sequentiallyConsistent) { budget.withLock { $0 }?.release() }
    }
}

/// Where a notification of a running record stands, for its waiter: its partition, when its record
/// started, and the dispatcher's decision and timers.
struct RetryContext: Sendable {
    /// The record's partition.
    var partition: KafkaTopicPartition
    /// When the record started.
    var recordStartedAt: ContinuousClock.Instant
    /// Records in the partition's uncommitted span now (`Int.max` when the partition is gone: park).
    var uncommittedRecords: @Sendable () -> Int
    var policy: RetryParkingPolicy
    var timers: RetryTimers
    /// The record's notifications all wait: it gives its partition slot up.
    var recordWaits: @Sendable () -> Void = {}
    /// One of them sends again: it takes a slot back.
    var recordResumes: @Sendable () -> Void = {}

    /// A context for a campaign page (docs/campaigns.md "A few tokens answered late"): no partition;
    /// a notification whose wait would keep its page unfinished longer than `age` since the page
    /// started is parked, and the page finishes without it.
    static func campaignPage(parkingAfter age: Duration) -> RetryContext {
        RetryContext(
            partition: KafkaTopicPartition(topic: "", partition: -1), recordStartedAt: .now, uncommittedRecords: { 0 },
            policy: RetryParkingPolicy(maxUncommittedRecords: .max, maxUncommittedAge: age), timers: RetryTimers())
    }

    /// A context for work outside any partition (tests, tools): never parks, waits on timers.
    static func unbounded(timers: RetryTimers = RetryTimers()) -> RetryContext {
        RetryContext(
            partition: KafkaTopicPartition(topic: "", partition: -1), recordStartedAt: .now, uncommittedRecords: { 0 },
            policy: RetryParkingPolicy(maxUncommittedRecords: .max, maxUncommittedAge: .seconds(Int64.max / 4)), timers: timers)
    }
}

/// The waiter of a notification sent by a running record (the hot path). Decides with
/// `RetryParkingPolicy`: waits on a timer with its budget permit released, or parks the notification
/// (`park` writes the row) and ends the send (`WaiterEndedSend`, `.parked`). Woken early while it waits (the span reached its
/// cap, the partition stopped), it parks. When parking fails (PostgreSQL unavailable) it waits on the
/// timer instead: the partition's span stays capped by the scheduler either way.
struct HotPathRetryWaiter: APNsRetryWaiter {
    let permit: NotificationPermit
    let context: RetryContext
    var activity: RecordActivity? = nil
    let logger: Logger
    /// Writes the `pending_retries` row: the delay still to wait, attempts so far, the reason.
    let park: @Sendable (Duration, Int, APNsRetryReason) async throws -> Void

    func wait(_ delay: Duration, attemptsSoFar: Int, reason: APNsRetryReason) async throws {
        var decision = context.policy.decide(
            uncommittedRecords: context.uncommittedRecords(), recordAge: context.recordStartedAt.duration(to: .now), delay: delay)
        var remaining = delay
        if decision == .waitOnTimer {
            permit.release()
            let start = ContinuousClock.now
            activity?.beginWait()
            let wake: RetryTimers.Wake
            do {
                wake = try await context.timers.sleep(for: delay, partition: context.partition)
            } catch {
                activity?.endWait()
                throw error
            }
            activity?.endWait()
            if wake == .elapsed {
                try await permit.acquire()
                return
            }
            remaining = max(.zero, delay - start.duration(to: .now))
            decision = .park(.spanFull)
        }
        do {
            try await park(remaining, attemptsSoFar, reason)
        } catch {
            logger.warning("parking a retry failed: waiting on a timer instead", ["error": "\(error)", "reason": reason.metricLabel])
            permit.release()
            try await Task.sleep(for: remaining)
            try await permit.acquire()
            return
        }
        if case .park(let why) = decision { throw WaiterEndedSend(.parked(reason: "\(why.rawValue), \(reason.metricLabel)")) }
    }
}

extension HotPathRetryWaiter {
    /// Waits for the device token's gate (`APNsDeviceGates`) with the budget permit released and the
    /// wait counted as the record's (it gives its partition slot up while all its notifications
    /// wait); takes a permit again before sending. Woken to park while in line (its partition's span
    /// is full, or the partition stops), it leaves the line and parks, due at once, like a timer wait.
    func waitForDeviceGate<T: Sendable>(attemptsSoFar: Int, _ turn: @Sendable () async throws -> T) async throws -> T {
        permit.release()
        activity?.beginWait()
        let outcome: Result<T, any Error>? = await withoutActuallyEscaping(turn) { turn in
            await withTaskGroup(of: GateRace<T>.self) { group in
                group.addTask {
                    do { return .turn(.success(try await turn())) } catch { return .turn(.failure(error)) }
                }
                group.addTask { [context] in
                    // As long as the longest retry horizon: only a wake to park ends it first.
                    let wake = try? await context.timers.sleep(for: .seconds(86_400), partition: context.partition)
                    return wake == .park ? .park : .cancelled
                }
                var result: Result<T, any Error>?
                var parking = false
                while let next = await group.next() {
                    switch next {
                    case .turn(let value):
                        result = value
                        group.cancelAll()
                    case .park:
                        parking = true
                        group.cancelAll()  // leaves the line; a slot handed over meanwhile still wins
                    case .cancelled:
                        break
                    }
                }
                if parking, case .failure(let error)? = result, error is CancellationError, !Task.isCancelled { return nil }
                return result
            }
        }
        activity?.endWait()
        guard let outcome else {
            do {
                try await park(.zero, attemptsSoFar, .tooManyRequests)
            } catch {
                logger.warning("parking a device-gated notification failed: sending it now", ["error": "\(error)"])
                try await permit.acquire()
                return try await turn()
            }
            throw WaiterEndedSend(.parked(reason: "\(RetryParkingPolicy.ParkReason.spanFull.rawValue), device gate"))
        }
        let value = try outcome.get()
        try await permit.acquire()
        return value
    }
}

/// How the race between a device gate and a wake to park ended.
private enum GateRace<T: Sendable>: Sendable {
    case turn(Result<T, any Error>)
    case park
    case cancelled
}

/// The waiter of a parked notification being re-driven: every wait puts it back in
/// `pending_retries`, due after the delay, and ends the send (`WaiterEndedSend`, `.parked`); nothing
/// waits in the process.
struct ParkedRetryWaiter: APNsRetryWaiter {
    let reschedule: @Sendable (Duration, Int, APNsRetryReason) async throws -> Void

    func wait(_ delay: Duration, attemptsSoFar: Int, reason: APNsRetryReason) async throws {
        try await reschedule(delay, attemptsSoFar, reason)
        throw WaiterEndedSend(.parked(reason: "rescheduled, \(reason.metricLabel)"))
    }
}

/// Whether a running request is only waiting: every notification it has in flight waits for an
/// APNs retry and it starts no more. Then its record gives its partition slot up
/// (`RetryContext.recordWaits`) until one of them sends again (`recordResumes`), so waiting
/// requests never hold the partition's in-flight slots. Transitions are reported in order.
final class RecordActivity: Sendable {
    private struct State {
        var inFlight = 0
        var waiting = 0
        var starting = true
        var idle = false
    }

    private let state = Mutex(State())
    private let context: RetryContext

    init(_ context: RetryContext) { self.context = context }

    /// A notification was admitted (its send handed to a send worker, or kept for the batch's own task).
    func notificationStarted() { update { $0.inFlight += 1 } }
    /// A notification's send ended (settled, parked or cancelled).
    func notificationEnded() { update { $0.inFlight -= 1 } }
    /// The request starts no more notifications.
    func startingDone() { update { $0.starting = false } }
    /// A notification begins waiting for a retry.
    func beginWait() { update { $0.waiting += 1 } }
    /// A notification's wait ended (to send again, or to be parked).
    func endWait() { update { $0.waiting -= 1 } }

    private func update(_ change: (inout State) -> Void) {
        state.withLock { state in
            change(&state)
            let idle = !state.starting && state.inFlight > 0 && state.waiting == state.inFlight
            guard idle != state.idle else { return }
            state.idle = idle
            // Called under this lock so that transitions reach the scheduler in order.
            if idle { context.recordWaits() } else { context.recordResumes() }
        }
    }
}
