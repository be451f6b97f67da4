/// Where a notification waits for its next APNs attempt: on a timer in the process, or parked in
/// `pending_retries` (docs/dispatcher-engine.md "Retries off the hot path, and parking"). A value
/// without I/O; the dispatcher asks it each time the APNs client wants to wait.
public struct RetryParkingPolicy: Sendable, Hashable {
    /// The most records a partition's uncommitted span holds (`PUSH_MAX_UNCOMMITTED_RECORDS`).
    /// Default 10,000.
    public var maxUncommittedRecords: Int
    /// The longest a record may stay unfinished because one of its notifications waits on a timer
    /// (`PUSH_MAX_UNCOMMITTED_AGE_MS`). Default 60 s.
    public var maxUncommittedAge: Duration

    /// Why a notification was parked; the label of log lines.
    public enum ParkReason: String, Sendable, Hashable {
        /// The partition's uncommitted span is full.
        case spanFull = "span_full"
        /// Waiting would keep the record unfinished past `maxUncommittedAge`.
        case ageCap = "age_cap"
    }

    /// The decision for one wait.
    public enum Decision: Sendable, Hashable {
        /// Wait in the process: the budget permit is released, the record stays unfinished.
        case waitOnTimer
        /// Write a `pending_retries` row and let the record finish.
        case park(ParkReason)
    }

    /// - Parameters: see the properties (defaults 10,000 records and 60 s).
    public init(maxUncommittedRecords: Int = 10_000, maxUncommittedAge: Duration = .seconds(60)) {
        self.maxUncommittedRecords = maxUncommittedRecords
        self.maxUncommittedAge = maxUncommittedAge
    }

    /// Decides where a notification waits `delay` before its next attempt.
    /// - Parameters:
    ///   - uncommittedRecords: records in its partition's uncommitted span now.
    ///   - recordAge: how long its record has been running.
    ///   - delay: the back-off the APNs client chose.
    /// - Returns: `.park(.spanFull)` when the span is full, `.park(.ageCap)` when the record would be
    ///   older than `maxUncommittedAge` once the delay passed, `.waitOnTimer` otherwise.
    public func decide(uncommittedRecords: Int, recordAge: Duration, delay: Duration) -> Decision {
        if uncommittedRecords >= maxUncommittedRecords { return .park(.spanFull) }
        if recordAge + delay > maxUncommittedAge { return .park(.ageCap) }
        return .waitOnTimer
    }
}

/// When a request some of whose notifications were parked publishes its `RequestCompleted`
/// (docs/dispatcher-engine.md "When a request with parked notifications completes"): once its
/// record finished and no parked notification of it remains. A value without I/O.
public struct ParkedRequestCompletion: Sendable, Hashable {
    /// The request's record finished (every notification recorded or parked).
    public var recordDone: Bool
    /// `pending_retries` rows of the request still waiting.
    public var parkedRemaining: Int

    /// - Parameters: see the properties.
    public init(recordDone: Bool, parkedRemaining: Int) {
        self.recordDone = recordDone
        self.parkedRemaining = parkedRemaining
    }

    /// Whether every notification of the request has its final outcome recorded.
    public var isComplete: Bool { recordDone && parkedRemaining == 0 }

    /// The counts of a `RequestCompleted` from the outcomes recorded in `send_log`.
    /// - Parameter outcomes: rows per outcome, by `DeliveryOutcome` proto name (`DELIVERED`, …).
    /// - Returns: total and per-outcome counts; an unknown name counts in the total only.
    public static func counts(_ outcomes: [String: Int]) -> (total: Int, delivered: Int, rejected: Int, failed: Int, skipped: Int) {
        var result = (total: 0, delivered: 0, rejected: 0, failed: 0, skipped: 0)
        for (name, count) in outcomes {
            result.total += count
            switch name {
            case "DELIVERED": result.delivered += count
            case "REJECTED": result.rejected += count
            case "FAILED": result.failed += count
            case "SKIPPED": result.skipped += count
            default: break
            }
        }
        return result
    }
}
