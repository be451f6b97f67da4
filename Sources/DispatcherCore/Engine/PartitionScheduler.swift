import Kafka

/// What the dispatcher does with the records of one partition, decided without I/O
/// (docs/dispatcher-engine.md): which records start now, which wait, which offset may be stored, and
/// when fetching should pause.
///
/// Two modes:
/// - `.parallel`: send requests. Up to `maxInFlight` records run at once; records with the same key
///   (request id) run one after the other in offset order; records without a key have no order.
/// - `.ordered`: token events. One batch at a time, in offset order, up to `batchSize` records.
///
/// The uncommitted span (`tracker.uncommitted`) never exceeds `maxUncommitted`: a record arriving
/// while the span is full is held outside it (not tracked, not started) until the finished prefix
/// moves (docs/dispatcher-engine.md "The cap on a partition's uncommitted span").
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
    /// Running records whose every notification waits for an APNs retry: they hold no slot of
    /// `maxInFlight` (`.parallel` only), so other records of the partition start meanwhile.
    private var waitingOffsets: Set<Int64> = []
    /// Fetching is paused by this scheduler's decision.
    private(set) var paused = false
    /// No record starts any more (revoked, or the process is stopping).
    private(set) var stopped = false
    /// The most records the uncommitted span may hold.
    let maxUncommitted: Int
    /// Records that arrived while the span was full, in offset order, not yet tracked.
    private var held: [KafkaMessage] = []
    private var heldHead = 0
    /// The highest offset received (tracked or held).
    private var highestReceived: Int64?
    /// Key and value bytes of the pending records (`pending`), for the process's in-flight budget.
    private(set) var pendingBytes = 0

    init(mode: Mode, pauseThreshold: Int, maxUncommitted: Int = .max) {
        self.mode = mode
        self.pauseThreshold = max(1, pauseThreshold)
        self.maxUncommitted = max(1, maxUncommitted)
    }

    /// Records taken from the consumer and not finished: running, ready, waiting for their key and
    /// held past the cap.
    var pending: Int {
        let heldCount = held.count - heldHead
        switch mode {
        case .parallel: return running + waitingOffsets.count + (ready.count - readyHead) + waitingBehindKeys + heldCount
        case .ordered: return (ready.count - readyHead) + (running > 0 ? runningBatchCount : 0) + heldCount
        }
    }

    /// The bytes a record holds while pending: its key and value (an oversized value the consumer did
    /// not copy counts nothing).
    static func bytes(of record: KafkaMessage) -> Int { record.value.count + (record.key?.count ?? 0) }

    /// Records in the uncommitted span (at most `maxUncommitted`).
    var uncommitted: Int { tracker.uncommitted }

    /// Whether the span is full: a notification waiting for a retry should be parked now.
    var atCap: Bool { tracker.uncommitted >= maxUncommitted }

    /// Whether `offset` is above every offset received so far. An offset at or below it was taken
    /// already within this assignment: the consumer handed the record out again (docs/kafka-consumer.md
    /// "Records handed out twice"), and it is ignored.
    func accepts(_ offset: KafkaOffset) -> Bool {
        if let highestReceived, offset.rawValue <= highestReceived { return false }
        return tracker.accepts(offset)
    }
    private var runningBatchCount = 0

    /// A record arrived from the consumer.
    /// - Returns: the records to start now (for `.parallel` at most one record; for `.ordered` a batch
    ///   that one worker handles), or an empty array when it waits. Records offered out of order or
    ///   after `stop()` are ignored.
    mutating func receive(_ record: KafkaMessage) -> [KafkaMessage] {
        guard !stopped, accepts(record.offset) else { return [] }
        highestReceived = record.offset.rawValue
        if heldHead < held.count || tracker.uncommitted >= maxUncommitted {
            held.append(record)
            pendingBytes += Self.bytes(of: record)
            return []
        }
        return admit(record)
    }

    /// Tracks a received record and starts or queues it.
    private mutating func admit(_ record: KafkaMessage) -> [KafkaMessage] {
        guard tracker.start(record.offset) else { return [] }
        pendingBytes += Self.bytes(of: record)
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
        admitHeld()
        return (store, release(records))
    }

    /// Held records the span has room for again join it (queued, not started: see `takeStartable`).
    private mutating func admitHeld() {
        guard !stopped else { return }
        while heldHead < held.count, tracker.uncommitted < maxUncommitted {
            let record = held[heldHead]
            heldHead += 1
            guard tracker.start(record.offset) else {
                pendingBytes -= Self.bytes(of: record)
                continue
            }
            switch mode {
            case .parallel:
                if let key = record.key {
                    if behindKey[key] != nil {
                        behindKey[key]!.append(record)
                        waitingBehindKeys += 1
                        continue
                    }
                    behindKey[key] = []
                }
                insertReady(record)
            case .ordered:
                ready.append(record)
            }
        }
        if heldHead == held.count {
            held.removeAll(keepingCapacity: true)
            heldHead = 0
        } else if heldHead >= 256, heldHead * 2 >= held.count {
            held.removeFirst(heldHead)
            heldHead = 0
        }
    }

    /// Records that may start now beyond those handed to finishing workers (after held records
    /// joined the span, several slots can be free at once): one worker each (`.parallel`), or one
    /// batch when no batch runs (`.ordered`).
    mutating func takeStartable() -> [[KafkaMessage]] {
        guard !stopped else { return [] }
        switch mode {
        case .parallel(let maxInFlight):
            var started: [[KafkaMessage]] = []
            while running < maxInFlight, readyHead < ready.count {
                running += 1
                started.append([popReady()])
            }
            return started
        case .ordered:
            guard running == 0 else { return [] }
            let batch = takeBatch()
            return batch.isEmpty ? [] : [batch]
        }
    }

    /// A worker gave its records up without finishing them (cancelled, abandoned on shutdown or
    /// revocation): they stay unfinished, so the offset never passes them.
    /// - Returns: the next records the worker should handle (none once stopped).
    mutating func abandon(_ records: [KafkaMessage]) -> [KafkaMessage] {
        release(records)
    }

    /// A running record's notifications all wait for an APNs retry: it gives its slot up.
    /// - Returns: records that may start in the freed slot (one worker each).
    mutating func recordWaits(_ record: KafkaMessage) -> [[KafkaMessage]] {
        guard case .parallel = mode, !waitingOffsets.contains(record.offset.rawValue) else { return [] }
        waitingOffsets.insert(record.offset.rawValue)
        running -= 1
        return takeStartable()
    }

    /// A waiting record sends again: it takes a slot back at once, even past `maxInFlight` for a
    /// moment (its notifications then queue for the process's notification budget).
    mutating func recordResumes(_ record: KafkaMessage) {
        guard waitingOffsets.remove(record.offset.rawValue) != nil else { return }
        running += 1
    }

    private mutating func release(_ records: [KafkaMessage]) -> [KafkaMessage] {
        for record in records { pendingBytes -= Self.bytes(of: record) }
        switch mode {
        case .parallel(let maxInFlight):
            for record in records {
                if waitingOffsets.remove(record.offset.rawValue) == nil { running -= 1 }
            }
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
        let dropped = (ready.count - readyHead) + waitingBehindKeys + (held.count - heldHead)
        for record in ready[readyHead...] { pendingBytes -= Self.bytes(of: record) }
        for record in held[heldHead...] { pendingBytes -= Self.bytes(of: record) }
        for waiting in behindKey.values {
            for record in waiting { pendingBytes -= Self.bytes(of: record) }
        }
        held.removeAll()
        heldHead = 0
        stopped = true
        ready.removeAll()
        readyHead = 0
        for key in behindKey.keys { behindKey[key] = [] }
        waitingBehindKeys = 0
        return dropped
    }

    /// Whether fetching should pause or resume now, given the pending records.
    mutating func flowChange() -> FlowChange? {
        let holding = heldHead < held.count
        if !paused, !stopped, pending >= pauseThreshold || holding {
            paused = true
            return .pause
        }
        if paused, pending <= pauseThreshold / 2, !holding {
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
