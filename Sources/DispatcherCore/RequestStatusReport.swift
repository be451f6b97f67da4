import Foundation

/// What `CampaignStore.status(requestID:)` answers (docs/campaigns.md "Request status").
public struct RequestStatusReport: Sendable, Equatable {
    public var requestID: String
    /// `accepted`, `scheduled`, `running`, `completed`, `cancelled` for a campaign row; `seen` when only
    /// `send_log` knows the request (an immediate request, running or completed).
    public var status: String
    public var isCampaign: Bool
    public var sendAtMs: Int64 = 0
    public var counts = CampaignCounts()
    public var cancelRequested = false

    /// One JSON object: `{"request_id","status","campaign","send_at_ms","processed","delivered",
    /// "rejected","failed","skipped","cancel_requested"}`.
    public var json: String {
        let fields: [String: Any] = [
            "request_id": requestID, "status": status, "campaign": isCampaign, "send_at_ms": sendAtMs,
            "processed": counts.processed, "delivered": counts.delivered, "rejected": counts.rejected,
            "failed": counts.failed, "skipped": counts.skipped, "cancel_requested": cancelRequested,
        ]
        let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
