import Kafka

/// What the dispatcher does with the records of one partition, decided without I/O
/// (docs/dispatcher-engine.md): which records start now, which wait, which offset may be stored, and
/// when fetching should pause.
///
/// Two modes:
/// - `.parallel`: send requests. Up to `maxInFlight` records run at once; records with the same key
///   (request id) run one after the other in offset order; records without a key have no order.
/// - `.ordered`: token events. One batch at a time, in offset order, up to `batchSize` records.
struct PartitionScheduler: Sendable {
    enum Mode: Sendable, Equatable {
        case parallel(maxInFlight: Int)
        case ordered(batchSize: Int)
    }

    /// A change of the partition's fetch state.
    enum FlowChange: Sendable, Equatable {
        case pause
        case resume
    }

    let mode: Mode
    /// Pending records (running + waiting) at which fetching pauses; it resumes at half.
    let pauseThreshold: Int
    private(set) var tracker = OffsetTracker()
    /// Records that may start (their key is free), lowest offset first.
    private var ready: [KafkaMessage] = []
    private var readyHead = 0
    /// Records waiting for an earlier record of their key, per key, in offset order. A key is present
    /// while one of its records is running or ready.
    private var behindKey: [[UInt8]: [KafkaMessage]] = [:]
    private var waitingBehindKeys = 0
    /// Records (parallel) or batches (ordered) running now.
    private(set) var running = 0
    /// Fetching is paused by this scheduler's decision.
    private(set) var paused = false
    /// No record starts any more (revoked, or the process is stopping).
    private(set) var stopped = false

    init(mode: Mode, pauseThreshold: Int) {
        self.mode = mode
        self.pauseThreshold = max(1, pauseThreshold)
    }

    /// Records taken from the consumer and not finished: running, ready and waiting for their key.
    var pending: Int {
        switch mode {
        case .parallel: running + (ready.count - readyHead) + waitingBehindKeys
        case .ordered: (ready.count - readyHead) + (running > 0 ? runningBatchCount : 0)
        }
    }
    private var runningBatchCount = 0

    /// A record arrived from the consumer.
    /// - Returns: the records to start now (for `.parallel` at most one record; for `.ordered` a batch
    ///   that one worker handles), or an empty array when it waits. Records offered out of order or
    ///   after `stop()` are ignored.
    mutating func receive(_ record: KafkaMessage) -> [KafkaMessage] {
        guard !stopped, tracker.start(record.offset) else { return [] }
        switch mode {
        case .parallel(let maxInFlight):
            if let key = record.key {
                if behindKey[key] != nil {
                    behindKey[key]!.append(record)
                    waitingBehindKeys += 1
                    return []
                }
                behindKey[key] = []
            }
            if running < maxInFlight {
                running += 1
                return [record]
            }
            insertReady(record)
            return []
        case .ordered:
            ready.append(record)
            return running == 0 ? takeBatch() : []
        }
    }

    /// Records a worker handled are finished (their outcomes acknowledged).
    /// - Returns: the offset to store when the finished prefix grew, and the next records the same
    ///   worker should handle (empty: the worker ends).
    mutating func finish(_ records: [KafkaMessage]) -> (store: KafkaOffset?, next: [KafkaMessage]) {
        var store: KafkaOffset?
        for record in records {
            if let offset = tracker.finish(record.offset) { store = offset }
        }
        return (store, release(records))
    }

    /// A worker gave its records up without finishing them (cancelled, abandoned on shutdown or
    /// revocation): they stay unfinished, so the offset never passes them.
    /// - Returns: the next records the worker should handle (none once stopped).
    mutating func abandon(_ records: [KafkaMessage]) -> [KafkaMessage] {
        release(records)
    }

    private mutating func release(_ records: [KafkaMessage]) -> [KafkaMessage] {
        switch mode {
        case .parallel(let maxInFlight):
            running -= records.count
            for record in records {
                guard let key = record.key, var waiting = behindKey[key] else { continue }
                if waiting.isEmpty {
                    behindKey[key] = nil
                } else {
                    let successor = waiting.removeFirst()
                    behindKey[key] = waiting
                    waitingBehindKeys -= 1
                    if !stopped { insertReady(successor) }
                }
            }
            guard !stopped, running < maxInFlight, readyHead < ready.count else { return [] }
            running += 1
            return [popReady()]
        case .ordered:
            running = 0
            runningBatchCount = 0
            return stopped ? [] : takeBatch()
        }
    }

    /// Stops starting records: drops every record not yet started (they stay unfinished and are read
    /// again by the next owner). Running records may still finish and move the offset.
    /// - Returns: how many records were dropped.
    @discardableResult
    mutating func stop() -> Int {
        let dropped = (ready.count - readyHead) + waitingBehindKeys
        stopped = true
        ready.removeAll()
        readyHead = 0
        for key in behindKey.keys { behindKey[key] = [] }
        waitingBehindKeys = 0
        return dropped
    }

    /// Whether fetching should pause or resume now, given the pending records.
    mutating func flowChange() -> FlowChange? {
        if !paused, !stopped, pending >= pauseThreshold {
            paused = true
            return .pause
        }
        if paused, pending <= pauseThreshold / 2 {
            paused = false
            return .resume
        }
        return nil
    }

    // MARK: Queues

    private mutating func takeBatch() -> [KafkaMessage] {
        guard case .ordered(let batchSize) = mode, readyHead < ready.count else { return [] }
        let end = min(ready.count, readyHead + max(1, batchSize))
        let batch = Array(ready[readyHead..<end])
        readyHead = end
        compactReady()
        running = 1
        runningBatchCount = batch.count
        return batch
    }

    private mutating func popReady() -> KafkaMessage {
        let record = ready[readyHead]
        readyHead += 1
        compactReady()
        return record
    }

    private mutating func compactReady() {
        if readyHead == ready.count {
            ready.removeAll(keepingCapacity: true)
            readyHead = 0
        } else if readyHead >= 256, readyHead * 2 >= ready.count {
            ready.removeFirst(readyHead)
            readyHead = 0
        }
    }

    /// Keeps `ready` sorted by offset (a successor freed by its key may be older than queued records).
    private mutating func insertReady(_ record: KafkaMessage) {
        var low = readyHead, high = ready.count
        while low < high {
            let middle = (low + high) / 2
            if ready[middle].offset < record.offset { low = middle + 1 } else { high = middle }
        }
        ready.insert(record, at: low)
    }
}
