import PushMessages

/// Fully populated push.v1 messages and the same messages in protoc text format.
enum Samples {
    static let token = String(repeating: "a1b2c3d4", count: 8)
    static let token2 = String(repeating: "0f", count: 40)

    static let device = Device(
        deviceToken: token, bundleID: "com.example.app", environment: .production, kind: .liveActivity,
        userID: "user-42", installationID: "inst-7",
        attributes: ["locale": "fr_FR", "os_version": "18.1", "model": "iPhone17,1", "app_version": "3.2.1"]
    )
    static let deviceText = """
        device_token: "\(token)" bundle_id: "com.example.app" environment: PRODUCTION kind: TOKEN_KIND_LIVE_ACTIVITY
        user_id: "user-42" installation_id: "inst-7"
        attributes { key: "locale" value: "fr_FR" } attributes { key: "os_version" value: "18.1" }
        attributes { key: "model" value: "iPhone17,1" } attributes { key: "app_version" value: "3.2.1" }
        """

    static let tokenEvent = TokenEvent(
        eventID: "5f0c7a52-9d1e-4f7e-8f1a-3c2b1a0e9d8c", action: .registered, device: device,
        eventTimeMs: 1_764_512_345_678, reason: "user_signed_in"
    )
    static let tokenEventText = """
        event_id: "5f0c7a52-9d1e-4f7e-8f1a-3c2b1a0e9d8c" action: REGISTERED device { \(deviceText) }
        event_time_ms: 1764512345678 reason: "user_signed_in"
        """

    static let registerTokenRequest = RegisterTokenRequest(device: device)
    static let registerTokenRequestText = "device { \(deviceText) }"

    static let registerTokenResponse = RegisterTokenResponse(deviceToken: token, eventID: "ev-1", eventTimeMs: 1_700_000_000_000)
    static let registerTokenResponseText = #"device_token: "\#(token)" event_id: "ev-1" event_time_ms: 1700000000000"#

    static let unregisterTokenRequest = UnregisterTokenRequest(deviceToken: token, bundleID: "com.example.app", reason: "notifications_disabled")
    static let unregisterTokenRequestText = #"device_token: "\#(token)" bundle_id: "com.example.app" reason: "notifications_disabled""#

    static let unregisterTokenResponse = UnregisterTokenResponse(deviceToken: token, eventID: "ev-2", eventTimeMs: Int64.max)
    static let unregisterTokenResponseText = #"device_token: "\#(token)" event_id: "ev-2" event_time_ms: 9223372036854775807"#

    static let payload = #"{"aps":{"alert":{"title":"Caf\u00e9 \/ ☕","body":"Line1\nLine2"},"badge":3},"k":[1,2.50,true,null]}"#
    static let notification = Notification(
        bundleID: "com.example.app", environment: .sandbox, pushType: .alert, priority: 10,
        expiration: 1_764_600_000, collapseID: "score", payload: payload, apnsID: "0e3b8f2c-8d7a-4b1e-9c3d-2a1b0c9d8e7f"
    )
    /// `payload` in text format: protoc's C-style escapes for `"` and `\`.
    static let payloadText = payload.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
    static let notificationText = """
        bundle_id: "com.example.app" environment: SANDBOX push_type: PUSH_TYPE_ALERT priority: 10
        expiration: 1764600000 collapse_id: "score" payload: "\(payloadText)"
        apns_id: "0e3b8f2c-8d7a-4b1e-9c3d-2a1b0c9d8e7f"
        """

    static let deviceTokens = DeviceTokens(deviceTokens: [token, token2, ""])
    static let deviceTokensText = #"device_tokens: "\#(token)" device_tokens: "\#(token2)" device_tokens: """#
    static let userIDs = UserIds(userIDs: ["u1", "ü2", "用户3"])
    static let userIDsText = #"user_ids: "u1" user_ids: "ü2" user_ids: "用户3""#
    static let appAudience = AppAudience(bundleID: "com.example.app", environment: .production)
    static let appAudienceText = #"bundle_id: "com.example.app" environment: PRODUCTION"#

    static let sendRequestTokens = SendRequest(
        requestID: "req-1", target: .deviceTokens(deviceTokens), notification: notification, createdAtMs: 1_764_512_000_000,
        traceParent: traceParent, sendAtMs: 1_764_512_600_000
    )
    static let sendRequestTokensText = """
        request_id: "req-1" device_tokens { \(deviceTokensText) } notification { \(notificationText) }
        created_at_ms: 1764512000000 trace_parent: "\(traceParent)" send_at_ms: 1764512600000
        """
    /// W3C Trace Context's example `traceparent` (https://www.w3.org/TR/trace-context/#examples-of-http-traceparent-headers).
    static let traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    static let cancelRequest = CancelRequest(
        requestID: "req-1", reason: "sent_by_mistake", requestedAtMs: 1_764_512_000_500, traceParent: traceParent)
    static let cancelRequestText = #"""
        request_id: "req-1" reason: "sent_by_mistake" requested_at_ms: 1764512000500
        trace_parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        """#
    static let sendRequestUsers = SendRequest(requestID: "req-2", target: .userIDs(userIDs), notification: notification)
    static let sendRequestUsersText = #"request_id: "req-2" user_ids { \#(userIDsText) } notification { \#(notificationText) }"#
    static let sendRequestAudience = SendRequest(requestID: "req-3", target: .audience(appAudience), createdAtMs: -1)
    static let sendRequestAudienceText = #"request_id: "req-3" audience { \#(appAudienceText) } created_at_ms: -1"#

    static let deliveryReport = DeliveryReport(
        eventID: "ev-3", requestID: "req-1", deviceToken: token, bundleID: "com.example.app", environment: .production,
        pushType: .voip, userID: "user-42", outcome: .rejected, httpStatus: 410, apnsReason: "Unregistered",
        apnsID: "0e3b8f2c-8d7a-4b1e-9c3d-2a1b0c9d8e7f", attempts: UInt32.max, requestedAtMs: 1_764_512_000_000,
        sentAtMs: 1_764_512_000_010, completedAtMs: 1_764_512_000_050, apnsUniqueID: "unique-1", collapseID: "c",
        outcomeReason: .retryHorizonExceeded
    )
    static let deliveryReportText = """
        event_id: "ev-3" request_id: "req-1" device_token: "\(token)" bundle_id: "com.example.app"
        environment: PRODUCTION push_type: PUSH_TYPE_VOIP user_id: "user-42" outcome: REJECTED http_status: 410
        apns_reason: "Unregistered" apns_id: "0e3b8f2c-8d7a-4b1e-9c3d-2a1b0c9d8e7f" attempts: 4294967295
        requested_at_ms: 1764512000000 sent_at_ms: 1764512000010 completed_at_ms: 1764512000050
        apns_unique_id: "unique-1" collapse_id: "c" outcome_reason: OUTCOME_REASON_RETRY_HORIZON_EXCEEDED
        """

    static let tokenInvalidated = TokenInvalidated(
        deviceToken: token, bundleID: "com.example.app", environment: .sandbox, userID: "user-42",
        apnsReason: "ExpiredToken", apnsTimestampMs: 1_764_000_000_000, requestID: "req-9", installationID: "inst-7",
        outcomeReason: .invalidDeviceToken
    )
    static let tokenInvalidatedText = """
        device_token: "\(token)" bundle_id: "com.example.app" environment: SANDBOX user_id: "user-42"
        apns_reason: "ExpiredToken" apns_timestamp_ms: 1764000000000 request_id: "req-9" installation_id: "inst-7"
        outcome_reason: OUTCOME_REASON_INVALID_DEVICE_TOKEN
        """

    static let requestCompleted = RequestCompleted(
        requestID: "req-1", total: 10, delivered: 6, rejected: 2, failed: 1, skipped: 1,
        requestedAtMs: 1_764_512_000_000, completedAtMs: 1_764_512_009_999, error: "e", status: .cancelled
    )
    static let requestCompletedText = """
        request_id: "req-1" total: 10 delivered: 6 rejected: 2 failed: 1 skipped: 1
        requested_at_ms: 1764512000000 completed_at_ms: 1764512009999 error: "e" status: REQUEST_STATUS_CANCELLED
        """

    static let campaignProgress = CampaignProgress(
        campaignID: "camp-1", requestID: "req-3", bundleID: "com.example.app", environment: .unspecified,
        processed: UInt64.max, delivered: 1 << 40, rejected: 3, failed: 0, skipped: 9, done: true,
        startedAtMs: 1_764_512_000_000, updatedAtMs: 1_764_512_100_000
    )
    static let campaignProgressText = """
        campaign_id: "camp-1" request_id: "req-3" bundle_id: "com.example.app" processed: 18446744073709551615
        delivered: 1099511627776 rejected: 3 skipped: 9 done: true started_at_ms: 1764512000000
        updated_at_ms: 1764512100000
        """

    static let feedbackDelivery = FeedbackEvent(
        eventID: "ev-3", eventTimeMs: 1_764_512_000_050, event: .deliveryReport(deliveryReport), traceParent: traceParent)
    static let feedbackDeliveryText = #"""
        event_id: "ev-3" event_time_ms: 1764512000050 delivery_report { \#(deliveryReportText) }
        trace_parent: "\#(traceParent)"
        """#
    static let feedbackInvalidated = FeedbackEvent(eventID: "ev-4", eventTimeMs: 1, event: .tokenInvalidated(tokenInvalidated))
    static let feedbackInvalidatedText = #"event_id: "ev-4" event_time_ms: 1 token_invalidated { \#(tokenInvalidatedText) }"#
    static let feedbackCompleted = FeedbackEvent(eventID: "ev-5", event: .requestCompleted(requestCompleted))
    static let feedbackCompletedText = #"event_id: "ev-5" request_completed { \#(requestCompletedText) }"#
    static let feedbackProgress = FeedbackEvent(eventID: "ev-6", event: .campaignProgress(campaignProgress))
    static let feedbackProgressText = #"event_id: "ev-6" campaign_progress { \#(campaignProgressText) }"#

    static let deadLetter = DeadLetter(
        sourceTopic: "push.send-requests.v1", sourcePartition: -1, sourceOffset: 123_456_789_012,
        originalKey: Array("req-1".utf8), originalValue: [0x00, 0xFF, 0x0A, 0x22, 0x5C, 0x80, 0x7F],
        originalHeaders: [
            DeadLetter.Header(key: "content-type", value: Array("application/json".utf8)),
            DeadLetter.Header(key: "x-trace", value: []),
            DeadLetter.Header(key: "content-type", value: [0x01, 0x02]),
        ],
        error: "notification.payload: not a JSON object", rejectedBy: "dispatcher", rejectedAtMs: 1_764_512_000_001,
        originalValueSize: 1_048_583, originalValueSha256: Array(0...31), originalValueTruncated: true
    )
    static let deadLetterText = #"""
        source_topic: "push.send-requests.v1" source_partition: -1 source_offset: 123456789012
        original_key: "req-1" original_value: "\000\377\n\"\\\200\177"
        original_headers { key: "content-type" value: "application/json" }
        original_headers { key: "x-trace" }
        original_headers { key: "content-type" value: "\001\002" }
        error: "notification.payload: not a JSON object" rejected_by: "dispatcher" rejected_at_ms: 1764512000001
        original_value_size: 1048583
        original_value_sha256: "\000\001\002\003\004\005\006\007\010\t\n\013\014\r\016\017\020\021\022\023\024\025\026\027\030\031\032\033\034\035\036\037"
        original_value_truncated: true
        """#
}
