import PushMessages

/// One `send_log` row waiting for its batch.
struct SendLogRow: Sendable, Hashable {
    /// The primary key: one final outcome per (request id, device token).
    struct Key: Sendable, Hashable {
        var requestID: String
        var deviceToken: String
    }

    var key: Key
    var eventID: String
    /// `DeliveryOutcome`'s proto name (`DELIVERED`, …).
    var outcome: String
    var httpStatus: Int64
    var apnsReason: String
    var apnsID: String
    var attempts: Int64
    /// The serialized `FeedbackEvent`, as the caller publishes it.
    var report: [UInt8]

    init(_ report: DeliveryReport, event: [UInt8]) {
        self.key = Key(requestID: report.requestID, deviceToken: report.deviceToken)
        self.eventID = report.eventID
        self.outcome = report.outcome.protoName ?? "UNKNOWN"
        self.httpStatus = Int64(report.httpStatus)
        self.apnsReason = report.apnsReason
        self.apnsID = report.apnsID
        self.attempts = Int64(report.attempts)
        self.report = event
    }

    /// The text columns, which PostgreSQL cannot store with U+0000 in them.
    var texts: [String] { [key.requestID, key.deviceToken, eventID, outcome, apnsReason, apnsID] }
}

/// The batching decisions of `SendLogWriter`, without I/O: rows come in, and each call says what
/// the caller must do next.
///
/// The first row of an empty batch makes its caller start the batch's timer, which sleeps the flush
/// interval and then asks for the batch (`timerFired`); it gets it unless the batch was taken
/// already. The row that fills a batch to `maxBatch` takes it at once. So a batch waits at most the
/// flush interval, holds at most `maxBatch` rows, and no timer task exists while nothing waits.
struct SendLogQueue: Sendable {
    /// A queued row and the id its caller waits on.
    struct Entry: Sendable {
        var id: Int
        var row: SendLogRow
    }

    /// What the caller of `enqueue` does next.
    enum Action: Sendable {
        /// Start a timer that sleeps the flush interval, then calls `timerFired(batch:)` with this number.
        case startTimer(batch: Int)
        /// Write these entries now (the batch is full).
        case flush([Entry])
        /// Only wait for the result.
        case wait
    }

    let maxBatch: Int
    private(set) var pending: [Entry] = []
    /// The number of the batch `pending` is filling; it grows each time a batch is taken.
    private(set) var batch = 0
    private var nextID = 0

    init(maxBatch: Int) {
        precondition(maxBatch >= 1, "maxBatch must be at least 1")
        self.maxBatch = maxBatch
    }

    /// Queues `row`; returns the id to wait on and what to do.
    mutating func enqueue(_ row: SendLogRow) -> (id: Int, action: Action) {
        let id = nextID
        nextID += 1
        pending.append(Entry(id: id, row: row))
        if pending.count >= maxBatch { return (id, .flush(take())) }
        return (id, pending.count == 1 ? .startTimer(batch: batch) : .wait)
    }

    /// The timer of batch `number` fired: returns the batch to write, or `nil` when it was taken
    /// already (it filled up).
    mutating func timerFired(batch number: Int) -> [Entry]? {
        guard number == batch, !pending.isEmpty else { return nil }
        return take()
    }

    private mutating func take() -> [Entry] {
        let taken = pending
        pending = []
        batch += 1
        return taken
    }
}
