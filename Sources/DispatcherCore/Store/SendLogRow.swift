import PushMessages

/// One `send_log_v2` row waiting for its batch.
struct SendLogRow: Sendable, Hashable {
    /// The primary key: one final outcome per (request id, device token).
    struct Key: Sendable, Hashable {
        var requestID: String
        var deviceToken: String
    }

    var key: Key
    /// The report's `requested_at_ms`, whose UTC day is the row's `request_day` (0: today's).
    var requestedAtMs: Int64
    /// `DeliveryOutcome`'s proto name (`DELIVERED`, …).
    var outcome: String
    /// The `integer` columns: clamped, as a status or a count past `Int32.max` never comes from Apple.
    var httpStatus: Int32
    var apnsReason: String
    var attempts: Int32
    /// The serialized `FeedbackEvent`, as the caller publishes it.
    var report: [UInt8]

    init(_ report: DeliveryReport, event: [UInt8]) {
        self.key = Key(requestID: report.requestID, deviceToken: report.deviceToken)
        self.requestedAtMs = report.requestedAtMs
        self.outcome = report.outcome.protoName ?? "UNKNOWN"
        self.httpStatus = Int32(clamping: report.httpStatus)
        self.apnsReason = report.apnsReason
        self.attempts = Int32(clamping: report.attempts)
        self.report = event
    }

    /// The text columns, which PostgreSQL cannot store with U+0000 in them.
    var texts: [String] { [key.requestID, key.deviceToken, outcome, apnsReason] }
}
