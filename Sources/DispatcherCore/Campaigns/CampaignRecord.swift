import DispatcherStatus
import PushMessages

/// One `campaigns` row as a runner reads it.
public struct CampaignRecord: Sendable {
    public var requestID: String
    /// The request as consumed (protobuf bytes of `SendRequest`).
    public var request: SendRequest
    public var state: CampaignState
    /// Not before, ms since the epoch (0: now).
    public var sendAtMs: Int64
    /// When the request was created (`created_at_ms`, else consumed), ms since the epoch.
    public var requestedAtMs: Int64
    /// When a runner first took it, ms since the epoch (database clock); 0 before.
    public var startedAtMs: Int64
    /// The last token of the last finished page; nil before the first checkpoint.
    public var cursor: String?
    public var counts: CampaignCounts
    public var cancelRequested: Bool
    /// Present when this record came from `takeLease`.
    public var lease: CampaignLease?
}
