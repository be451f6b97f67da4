import PushMessages

/// How the handling of one send-request record ended (docs/dispatcher-engine.md "Outcomes are
/// values"): returned by `SendRequestProcessor.process`, never thrown.
enum RecordOutcome: Sendable, Equatable {
    /// Every notification has its outcome recorded and its report acknowledged, and the
    /// `RequestCompleted` was published (or the request had completed before): the record is done.
    case finished
    /// Some notifications wait in `pending_retries`; their re-drives publish the `RequestCompleted`.
    /// The record is done: nothing of it is left to this handling.
    case handedToParking
    /// Stopped before every notification started (graceful shutdown, revocation, a lost partition):
    /// those in flight finished and were recorded, but the record is not done, so its offset is
    /// never stored and it is read again.
    case abandoned
}

/// How one notification left the send and settle stages.
enum NotificationResult: Sendable {
    /// Its final outcome, recorded in `send_log` and its report published (or being published).
    case settled(DeliveryReport)
    /// Parked in `pending_retries` (or put back there by a re-drive): no outcome yet.
    case parked
}
