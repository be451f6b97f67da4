import Kafka

/// The engine's bookkeeping, decided without I/O (docs/dispatcher-engine.md "Decisions as values"):
/// one `PartitionScheduler` per partition, the workers running records, the process's in-flight
/// budget (records and bytes), and who waits for what. `Dispatcher` keeps it in a `Mutex`, feeds it
/// events (a record received, a worker finished, partitions revoked or lost, a stop) and performs the
/// actions it returns (spawn a worker, store an offset, pause or resume fetching, cancel workers,
/// resume waiters) after or, for the offset store, during the call.
///
/// Waiters are ids the caller chooses (`makeID()`); the caller keeps each id's continuation and
/// resumes the ids returned here.
struct EngineStateMachine: Sendable {
    /// The limits the decisions follow (`DispatcherConfiguration`).
    struct Settings: Sendable {
        /// The topic whose records run in offset order, in batches (token events); every other topic's
        /// records run in parallel by key (send requests).
        var orderedTopic: String
        var tokenEventBatchSize = 500
        var maxInFlightPerPartition = 256
        var pauseThresholdPerPartition = 1_024
        var maxUncommittedRecords = Int.max
        /// Records taken from the consumer and not finished, all partitions.
        var maxInFlightRecords = 10_000
        /// Key and value bytes of those records; a record larger than this is admitted when nothing
        /// else is in flight.
        var maxInFlightRecordBytes = 64 << 20
    }

    /// Records handed to a new worker (one send request, or a batch of token events).
    struct WorkerSpawn: Sendable {
        var id: Int
        var partition: KafkaTopicPartition
        /// The partition's generation when the worker started: a worker of an older one only leaves.
        var generation: Int
        var records: [KafkaMessage]
    }

    /// What follows a received record.
    struct Received: Sendable {
        var spawns: [WorkerSpawn] = []
        var flow: PartitionScheduler.FlowChange?
        /// The partition's uncommitted span is full: its notifications waiting on a timer should park.
        var atCap = false
        /// The consumer handed out a record of the partition that it had handed out before in this
        /// assignment (its offset was taken already): the record is ignored and nothing changes.
        var repeated = false
    }

    /// What a worker does after its records ended.
    struct WorkerStep: Sendable {
        /// The records it handles next; empty: the worker ended.
        var next: [KafkaMessage] = []
        /// New workers for records that may start now.
        var spawns: [WorkerSpawn] = []
        var flow: PartitionScheduler.FlowChange?
        /// The intake waits for room and has it now.
        var resumeIntake = false
        /// Idle waiters whose partitions have no worker any more.
        var idleWaitersWoken: [Int] = []
    }

    private struct Slot {
        var generation: Int
        var scheduler: PartitionScheduler
    }

    private struct Worker {
        var partition: KafkaTopicPartition
        /// Waiting out an infrastructure retry: cancelled first when the process stops or the partition moves.
        var retrying = false
        var cancelRequested = false
    }

    let settings: Settings
    private var slots: [KafkaTopicPartition: Slot] = [:]
    private var workers: [Int: Worker] = [:]
    private var nextID = 0
    /// The process is stopping: no record is accepted or started any more.
    private(set) var stopping = false
    /// The bytes of the record the intake waits to hand over, while it waits for room.
    private var intakeWaitsFor: Int?
    private var idleWaiters: [Int: Set<KafkaTopicPartition>?] = [:]

    init(settings: Settings) {
        self.settings = settings
    }

    /// A new id for a waiter (or any caller's use); never repeats.
    mutating func makeID() -> Int {
        nextID += 1
        return nextID
    }

    // MARK: The in-flight budget

    /// Records taken from the consumer and not finished (running, queued, held past the cap).
    var pendingRecords: Int { slots.values.reduce(0) { $0 + $1.scheduler.pending } }
    /// Their key and value bytes.
    var pendingBytes: Int { slots.values.reduce(0) { $0 + $1.scheduler.pendingBytes } }

    /// Whether a record of `bytes` may be taken now: the budget has room for it in records and bytes,
    /// or nothing at all is in flight (so a record larger than the whole budget never deadlocks).
    func hasRoom(forBytes bytes: Int) -> Bool {
        let records = pendingRecords
        if records == 0 { return true }
        return records < settings.maxInFlightRecords && pendingBytes + bytes <= settings.maxInFlightRecordBytes
    }

    /// The intake holds a record of `bytes` and asks for room.
    /// - Returns: true when it must wait (until an action says `resumeIntake`); false when it may go on.
    mutating func intakeNeedsRoom(forBytes bytes: Int) -> Bool {
        guard !stopping, !hasRoom(forBytes: bytes) else { return false }
        intakeWaitsFor = bytes
        return true
    }

    /// The intake stopped waiting (cancelled).
    /// - Returns: whether it was waiting (its continuation is to be resumed).
    mutating func intakeStoppedWaiting() -> Bool {
        defer { intakeWaitsFor = nil }
        return intakeWaitsFor != nil
    }

    /// Room was freed: the waiting intake goes on when the budget has room for its record (or the
    /// process stops).
    mutating func roomFreed() -> Bool {
        guard let bytes = intakeWaitsFor, stopping || hasRoom(forBytes: bytes) else { return false }
        intakeWaitsFor = nil
        return true
    }

    // MARK: Records

    /// A record arrived from the consumer: its partition's scheduler takes it and may start it.
    /// Ignored once the process is stopping, and when its offset was taken already in this
    /// assignment (`Received.repeated`): a partition's state starts over only when the partition is
    /// assigned again (`revocationEnded` drops it), so an older offset within one assignment is the
    /// consumer handing a record out twice, never a reason to drop the records queued behind it.
    mutating func recordReceived(_ record: KafkaMessage) -> Received {
        guard !stopping else { return Received() }
        let partition = record.topicPartition
        var received = Received()
        if let slot = slots[partition], !slot.scheduler.stopped, !slot.scheduler.accepts(record.offset) {
            received.repeated = true
            return received
        }
        // Taken out of the dictionary while it changes, so that its queues are not copied.
        var slot = slots.removeValue(forKey: partition) ?? newSlot(for: record.topic)
        let start = slot.scheduler.receive(record)
        received.flow = slot.scheduler.flowChange()
        received.atCap = slot.scheduler.atCap
        let generation = slot.generation
        slots[partition] = slot
        if !start.isEmpty { received.spawns = [spawn(start, partition: partition, generation: generation)] }
        return received
    }

    private mutating func newSlot(for topic: String) -> Slot {
        let mode: PartitionScheduler.Mode =
            topic == settings.orderedTopic
            ? .ordered(batchSize: settings.tokenEventBatchSize)
            : .parallel(maxInFlight: settings.maxInFlightPerPartition)
        return Slot(generation: makeID(), scheduler: PartitionScheduler(
            mode: mode, pauseThreshold: settings.pauseThresholdPerPartition, maxUncommitted: settings.maxUncommittedRecords))
    }

    private mutating func spawn(_ records: [KafkaMessage], partition: KafkaTopicPartition, generation: Int) -> WorkerSpawn {
        let id = makeID()
        workers[id] = Worker(partition: partition)
        return WorkerSpawn(id: id, partition: partition, generation: generation, records: records)
    }

    // MARK: Workers

    /// A worker's records ended: `finished` (outcomes recorded and acknowledged) or given up.
    /// - Parameters:
    ///   - cancelled: the worker's task is cancelled: the next record it would take is given up too.
    ///   - storeOffset: stores the partition's new finished prefix (called during this event, so
    ///     that stores of a partition never go backwards); returns false when the partition is no
    ///     longer assigned, whose state is then dropped.
    mutating func workerFinished(
        _ worker: WorkerSpawn, records: [KafkaMessage], finished: Bool, cancelled: Bool, storeOffset: (KafkaOffset) -> Bool
    ) -> WorkerStep {
        var step = WorkerStep()
        let partition = worker.partition
        guard slots[partition]?.generation == worker.generation, var slot = slots.removeValue(forKey: partition) else {
            step.idleWaitersWoken = workerEnded(worker.id)
            step.resumeIntake = roomFreed()
            return step
        }
        if finished {
            let result = slot.scheduler.finish(records)
            step.next = result.next
            // Held records that joined the span may start beyond this worker's next one.
            step.spawns = slot.scheduler.takeStartable().map { spawn($0, partition: partition, generation: worker.generation) }
            if let offset = result.store, !storeOffset(offset) { slot.scheduler.stop() }
        } else {
            step.next = slot.scheduler.abandon(records)
        }
        if cancelled, !step.next.isEmpty { step.next = slot.scheduler.abandon(step.next) }
        step.flow = slot.scheduler.flowChange()
        slots[partition] = slot
        if step.next.isEmpty { step.idleWaitersWoken = workerEnded(worker.id) }
        step.resumeIntake = roomFreed()
        return step
    }

    /// A worker ended (its task returns).
    /// - Returns: idle waiters to resume.
    mutating func workerEnded(_ id: Int) -> [Int] {
        workers[id] = nil
        var woken: [Int] = []
        for (waiter, partitions) in idleWaiters where isIdle(partitions) {
            idleWaiters[waiter] = nil
            woken.append(waiter)
        }
        return woken
    }

    /// Whether worker `id` should stop waiting for its end: it ended, or it is to be cancelled.
    func workerGone(_ id: Int) -> Bool { workers[id].map(\.cancelRequested) ?? true }

    /// A worker starts or ends a wait for an infrastructure retry.
    mutating func workerRetrying(_ id: Int, _ retrying: Bool) {
        workers[id]?.retrying = retrying
    }

    /// A running send request's notifications all wait for an APNs retry: it gives its partition
    /// slot up.
    /// - Returns: workers for records that start in the freed slot.
    mutating func recordWaits(_ record: KafkaMessage, of worker: WorkerSpawn) -> [WorkerSpawn] {
        guard slots[worker.partition]?.generation == worker.generation, var slot = slots.removeValue(forKey: worker.partition) else { return [] }
        let start = slot.scheduler.recordWaits(record)
        slots[worker.partition] = slot
        return start.map { spawn($0, partition: worker.partition, generation: worker.generation) }
    }

    /// A waiting send request sends again: it takes its slot back.
    mutating func recordResumes(_ record: KafkaMessage, of worker: WorkerSpawn) {
        guard slots[worker.partition]?.generation == worker.generation else { return }
        slots[worker.partition]?.scheduler.recordResumes(record)
    }

    /// Records in the uncommitted span of the worker's partition; `Int.max` (park at once) when the
    /// partition was revoked or reset since the worker started, or the process is stopping.
    func uncommittedRecords(of worker: WorkerSpawn) -> Int {
        guard !stopping, let slot = slots[worker.partition], slot.generation == worker.generation, !slot.scheduler.stopped else { return .max }
        return slot.scheduler.uncommitted
    }

    /// Whether the worker's records should start nothing more: the process is stopping, or the
    /// partition was revoked, lost or reset since the worker started.
    func isAbandoned(_ worker: WorkerSpawn) -> Bool {
        guard !stopping, let slot = slots[worker.partition], slot.generation == worker.generation else { return true }
        return slot.scheduler.stopped
    }

    // MARK: Stopping and rebalances

    /// Graceful stop: every partition stops (queued records dropped); no record is accepted any more.
    /// - Returns: how many records were dropped, and the workers to cancel (those waiting out an
    ///   infrastructure retry).
    mutating func stopRequested() -> (dropped: Int, cancel: [Int], resumeIntake: Bool) {
        stopping = true
        var dropped = 0
        for key in slots.keys { dropped += slots[key]!.scheduler.stop() }
        return (dropped, requestCancel { $0.retrying }, roomFreed())
    }

    /// Partitions revoked (`lost: false`, waited for up to the drain) or lost (the member was
    /// evicted: not waited for, nothing stored). Both stop starting records at once; running records
    /// go on (a lost partition's start no new notification and are never stored).
    /// - Returns: the workers to cancel (those waiting out an infrastructure retry), and whether the
    ///   caller waits for the partitions' workers before `revocationEnded`.
    mutating func partitionsRevoked(_ partitions: Set<KafkaTopicPartition>, lost: Bool) -> (cancel: [Int], drain: Bool) {
        for partition in partitions { slots[partition]?.scheduler.stop() }
        return (requestCancel { partitions.contains($0.partition) && $0.retrying }, !lost)
    }

    /// A lost assignment: `partitionsRevoked(_, lost: true)`.
    mutating func assignmentLost(_ partitions: Set<KafkaTopicPartition>) -> [Int] {
        partitionsRevoked(partitions, lost: true).cancel
    }

    /// The revocation is answered: the partitions' state is dropped (their records' room freed).
    /// - Parameter drained: whether their workers ended within the drain; if not, they are cancelled.
    /// - Returns: the workers to cancel and whether the waiting intake goes on.
    mutating func revocationEnded(_ partitions: Set<KafkaTopicPartition>, drained: Bool) -> (cancel: [Int], resumeIntake: Bool) {
        for partition in partitions { slots[partition] = nil }
        return (drained ? [] : cancelWorkers(of: partitions), roomFreed())
    }

    /// Marks the workers of `partitions` (every worker when nil) to be cancelled.
    /// - Returns: their ids.
    mutating func cancelWorkers(of partitions: Set<KafkaTopicPartition>?) -> [Int] {
        requestCancel { worker in partitions.map { $0.contains(worker.partition) } ?? true }
    }

    private mutating func requestCancel(_ selected: (Worker) -> Bool) -> [Int] {
        let ids = workers.filter { selected($0.value) }.map(\.key)
        for id in ids { workers[id]?.cancelRequested = true }
        return ids
    }

    /// Whether no worker serves `partitions` (any partition when nil).
    func isIdle(_ partitions: Set<KafkaTopicPartition>?) -> Bool {
        workers.values.allSatisfy { worker in partitions.map { !$0.contains(worker.partition) } ?? false }
    }

    /// Waiter `id` waits until no worker serves `partitions` (any when nil).
    /// - Returns: false when they are idle already (nothing registered).
    mutating func waitForIdle(_ id: Int, partitions: Set<KafkaTopicPartition>?) -> Bool {
        guard !isIdle(partitions) else { return false }
        idleWaiters[id] = partitions
        return true
    }

    /// Waiter `id` stops waiting (its time is over, or it is cancelled).
    /// - Returns: whether it was waiting (its continuation is to be resumed).
    mutating func stopWaitingForIdle(_ id: Int) -> Bool {
        idleWaiters.removeValue(forKey: id) != nil
    }

    /// Records pending per partition, and each partition's uncommitted span (for the gauges).
    var uncommitted: [KafkaTopicPartition: Int] { slots.mapValues { $0.scheduler.tracker.uncommitted } }
}
