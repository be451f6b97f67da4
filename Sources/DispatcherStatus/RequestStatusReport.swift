import ProtobufCodec

/// Where a send request stands, as PostgreSQL knows it (docs/campaigns.md "Request status"): what
/// `pushctl status` prints and the dispatcher's admin port answers at `GET /v1/requests/<id>`.
/// Built by `RequestStatusDecision` from the rows `RequestStatusReader` read.
public struct RequestStatusReport: Sendable, Equatable {
    /// `SendRequest.request_id`.
    public var requestID: String
    /// `accepted`, `scheduled`, `running`, `completed` or `cancelled` (the contract's `RequestStatus`
    /// names in lowercase).
    public var state: CampaignState
    /// Whether the request is a `campaigns` row (an app audience, or any request with a future
    /// `send_at_ms`); false for an immediate request, known from `send_log`, `request_completions`
    /// and `pending_requests`.
    public var isCampaign: Bool
    /// Not before, ms since the epoch; 0 for now (campaign rows only).
    public var sendAtMs: Int64 = 0
    /// Final outcomes so far: the campaign row's checkpointed counters, or an immediate request's
    /// `send_log` rows by outcome.
    public var counts = CampaignCounts()
    /// Notifications of an immediate request parked in `pending_retries`, waiting for an APNs retry.
    public var parked: Int64 = 0
    /// A `CancelRequest` was recorded for the campaign (it may still be settling its rest as SKIPPED).
    public var cancelRequested = false
    /// When a runner first took the campaign, ms since the epoch; 0 when unknown or not started.
    public var startedAtMs: Int64 = 0
    /// When the request finished, ms since the epoch; 0 while it is open.
    public var completedAtMs: Int64 = 0

    /// - Parameters: see the properties.
    public init(requestID: String, state: CampaignState, isCampaign: Bool) {
        self.requestID = requestID
        self.state = state
        self.isCampaign = isCampaign
    }

    /// The state's name: `accepted`, `scheduled`, `running`, `completed` or `cancelled`.
    public var status: String { state.rawValue }

    /// One JSON object, keys in this order: `request_id`, `status`, `campaign` (bool), `send_at_ms`,
    /// `processed`, `delivered`, `rejected`, `failed`, `skipped`, `parked`, `cancel_requested` (bool),
    /// `started_at_ms`, `completed_at_ms` (numbers are integers; times ms since the epoch, 0 = none).
    public var json: String {
        var writer = JSONWriter()
        writer.beginObject()
        writer.writeKey("request_id")
        writer.writeString(requestID)
        writer.writeKey("status")
        writer.writeString(status)
        writer.writeKey("campaign")
        writer.writeRaw(isCampaign ? "true" : "false")
        for (key, value) in [("send_at_ms", sendAtMs), ("processed", counts.processed), ("delivered", counts.delivered),
                             ("rejected", counts.rejected), ("failed", counts.failed), ("skipped", counts.skipped),
                             ("parked", parked)] {
            writer.writeKey(key)
            writer.writeNumber(String(value))
        }
        writer.writeKey("cancel_requested")
        writer.writeRaw(cancelRequested ? "true" : "false")
        writer.writeKey("started_at_ms")
        writer.writeNumber(String(startedAtMs))
        writer.writeKey("completed_at_ms")
        writer.writeNumber(String(completedAtMs))
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }
}
