import APNs
import DispatcherStatus
import Kafka
import ProtobufCodec
import PushDomain
import PushMessages

/// Turns a `push.send-requests.v1` record into a checked `SendRequest`, or the reason it goes to
/// the dead-letter topic (naming the field).
public enum SendRequestDecoder {
    /// A record that cannot be sent: why, naming the field.
    public struct Rejection: Error, Sendable, CustomStringConvertible {
        /// What is wrong, naming the field.
        public let description: String
        /// The dead-letter reason (`push_dead_letters_total{reason}`): `invalid_send_request`,
        /// `send_request_too_large` or `too_many_tokens`.
        public let reason: String
        init(_ description: String, reason: String = "invalid_send_request") {
            self.description = description
            self.reason = reason
        }
    }

    /// Bounds on one decoded send request (`IntakeSettings`), enforced before and while decoding.
    public struct Limits: Sendable, Equatable {
        /// Most bytes of the record's value as the Kafka client hands it over (decompressed).
        public var maxBytes: Int
        /// Most entries of `device_tokens` or `user_ids`.
        public var maxTokens: Int

        /// - Parameters: see the fields; defaults 4 MiB and 10,000 (`IntakeSettings`).
        public init(maxBytes: Int = 4 * 1024 * 1024, maxTokens: Int = 10_000) {
            self.maxBytes = maxBytes
            self.maxTokens = maxTokens
        }
    }

    /// Decodes by the record's `content-type` header: proto3 JSON for `application/json`, protobuf
    /// otherwise (the header may be absent).
    ///
    /// The value is refused unread when it exceeds `limits.maxBytes`; a list of more than
    /// `limits.maxTokens` device tokens or user ids is refused before any of it is built (protobuf: the
    /// entries are counted on the wire first; JSON: the parser stops at the first entry past the limit).
    /// - Throws: `Rejection` for an undecodable, invalid or oversized request.
    public static func decode(_ message: KafkaMessage, limits: Limits = Limits()) throws(Rejection) -> SendRequest {
        try decode(message, header: RecordContentType(of: message), limits: limits).request
    }

    /// ``decode(_:limits:)`` with the record's `content-type` parsed already (`SendRequestsRoute`),
    /// returning the request with the notification template its check built.
    /// - Throws: `Rejection`, as ``decode(_:limits:)``.
    static func decode(_ message: KafkaMessage, header: RecordContentType, limits: Limits) throws(Rejection) -> CheckedSendRequest {
        guard message.value.count <= limits.maxBytes else { throw tooLarge(bytes: message.value.count, maxBytes: limits.maxBytes) }
        let contentType = header.text
        let isJSON = header.isJSON
        guard header.isEmpty || isJSON || header.isProtobuf else {
            throw Rejection("content-type: \"\(contentType)\" is neither application/json nor \(SendRequest.protobufContentType)")
        }
        if let name = header.message, name != SendRequest.protoMessageName {
            throw Rejection("content-type: \"\(contentType)\" names another message than \(SendRequest.protoMessageName)")
        }
        var request: SendRequest
        do {
            if isJSON {
                // No JSON array or object of a send request may hold more entries than a token list.
                request = try SendRequest(jsonUTF8: message.value, options: JSONDecodingOptions(maximumElements: limits.maxTokens))
            } else {
                try checkTargetSize(message.value, maxTokens: limits.maxTokens)
                request = try SendRequest(protobufBytes: message.value)
            }
        } catch let error as Rejection {
            throw error
        } catch let error as ProtobufError where error.code == .tooManyElements {
            throw tooManyTokens(limits.maxTokens, detail: "\(error)")
        } catch {
            throw Rejection("undecodable SendRequest (content-type \"\(contentType)\"): \(error)")
        }
        let template = try checked(request)
        return CheckedSendRequest(request: request, template: template)
    }

    /// The refusal of a record value of `bytes` (after the Kafka client decompressed it) over
    /// `maxBytes` (`PUSH_MAX_SEND_REQUEST_BYTES`), reason `send_request_too_large`.
    static func tooLarge(bytes: Int, maxBytes: Int) -> Rejection {
        Rejection(
            "record value: \(bytes) bytes (after the Kafka client decompressed it); at most \(maxBytes) (PUSH_MAX_SEND_REQUEST_BYTES)",
            reason: "send_request_too_large")
    }

    private static func tooManyTokens(_ maxTokens: Int, detail: String) -> Rejection {
        Rejection(
            "target: more than \(maxTokens) device tokens or user ids (PUSH_MAX_TOKENS_PER_REQUEST); send a larger audience as a campaign (\(detail))",
            reason: "too_many_tokens")
    }

    /// Counts the entries of `device_tokens` (field 2) and `user_ids` (field 3) of a protobuf
    /// `SendRequest` on the wire, without building any of them; repeated occurrences of the target
    /// field merge, so their entries add up.
    /// - Throws: `Rejection` (`too_many_tokens`) past `maxTokens`; `ProtobufError` for bad framing.
    static func checkTargetSize(_ bytes: [UInt8], maxTokens: Int) throws -> Void {
        var reader = ProtobufReader(bytes: bytes)
        var count = 0
        while let tag = try reader.readTag() {
            guard tag.number == 2 || tag.number == 3, tag.wireType == .lengthDelimited else {
                try reader.skipField(tag)
                continue
            }
            let counted = count
            count += try reader.readEmbedded { (list: inout ProtobufReader) throws(ProtobufError) -> Int in
                var entries = 0
                while let entry = try list.readTag() {
                    if entry.number == 1 {
                        entries += 1
                        // Stop at the first entry past the limit; the rest is never read.
                        if counted + entries > maxTokens { return entries }
                    }
                    try list.skipField(entry)
                }
                return entries
            }
            if count > maxTokens { throw tooManyTokens(maxTokens, detail: "stopped at entry \(count)") }
        }
    }

    /// Checks what the dispatcher needs before any token is looked up.
    /// - Throws: `Rejection` naming the first bad field.
    public static func check(_ request: SendRequest) throws(Rejection) {
        _ = try checked(request)
    }

    /// ``check(_:)``, returning the notification template the check builds (nil for a broadcast, a
    /// `channel_id` target, whose content `BroadcastAdmission` checks): the processor sends with it.
    /// - Throws: `Rejection` naming the first bad field.
    static func checked(_ request: SendRequest) throws(Rejection) -> NotificationTemplate? {
        guard !request.requestID.isEmpty else { throw Rejection("request_id: is required") }
        try rejecting { () throws(InvalidFieldError) in try DeviceValidator.checkIdentifier(request.requestID, field: "request_id") }
        guard let target = request.target else { throw Rejection("target: one of device_tokens, user_ids, audience or channel_id is required") }
        switch target {
        case .deviceTokens(let tokens):
            guard !tokens.deviceTokens.isEmpty else { throw Rejection("device_tokens.device_tokens: is empty") }
        case .userIDs(let users):
            guard !users.userIDs.isEmpty else { throw Rejection("user_ids.user_ids: is empty") }
            for (index, user) in users.userIDs.enumerated() {
                try rejecting { () throws(InvalidFieldError) in try DeviceValidator.checkUserID(user, field: "user_ids.user_ids[\(index)]", required: true) }
            }
        case .audience:
            break  // checked below, once the notification is (campaigns: AudienceQuery)
        case .channelID(let channelID):
            try checkChannelID(channelID)
        }
        guard let notification = request.notification else { throw Rejection("notification: is required") }
        try rejecting { () throws(InvalidFieldError) in try DeviceValidator.checkBundleID(notification.bundleID, field: "notification.bundle_id") }
        if case .channelID = target {
            // A broadcast (docs/live-activities.md): its content is BroadcastAdmission's, reported in
            // its BroadcastReport; here only what makes it no broadcast at all.
            guard request.sendAtMs == 0 else { throw Rejection("send_at_ms: a broadcast is sent at once; scheduling is not supported") }
            if case .unrecognized = notification.environment { throw Rejection("notification.environment: unknown environment") }
            return nil
        }
        guard notification.pushType.apnsPushType != nil else {
            throw Rejection("notification.push_type: unknown push type number \(notification.pushType.rawValue)")
        }
        if let expiration = notification.expiration, expiration > 100_000_000_000 {
            throw Rejection("notification.expiration: \(expiration) looks like milliseconds; expected seconds since the epoch (or 0)")
        }
        if notification.collapseID.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw Rejection("notification.collapse_id: contains a control character")
        }
        if case .unrecognized = notification.environment {
            throw Rejection("notification.environment: unknown environment")
        }
        // Apple's rules, checked once on a stand-in token.
        let template = try NotificationTemplate(notification, requestID: request.requestID)
        do {
            try APNsNotificationValidator().validate(template.request(for: NotificationTemplate.placeholderToken))
        } catch {
            throw Rejection("\(NotificationTemplate.field(for: error)): \(error.message)")
        }
        // Campaign hook (docs/campaigns.md): the audience and its filter.
        if case .audience = target { try rejecting { () throws(InvalidFieldError) in _ = try AudienceQuery(request) } }
        return template
    }
}

extension SendRequestDecoder {
    /// A `channel_id`: Apple's `apns-channel-id` is base64 (docs/apns-protocol.md §8), sent as a header.
    /// - Throws: `Rejection` when it is empty, longer than 256 characters, or not base64 characters.
    static func checkChannelID(_ channelID: String) throws(Rejection) {
        guard !channelID.isEmpty else { throw Rejection("channel_id: is empty") }
        guard channelID.utf8.count <= 256 else { throw Rejection("channel_id: longer than 256 characters") }
        let allowed = channelID.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A) || byte == UInt8(ascii: "+")
                || byte == UInt8(ascii: "/") || byte == UInt8(ascii: "=") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
        guard allowed else { throw Rejection("channel_id: \"\(channelID)\" is not base64 (Apple's apns-channel-id)") }
    }
}

/// Runs a `DeviceValidator` check, turning its error into a `Rejection`.
private func rejecting(_ check: () throws(InvalidFieldError) -> Void) throws(SendRequestDecoder.Rejection) {
    do {
        try check()
    } catch {
        throw SendRequestDecoder.Rejection(error.description)
    }
}

/// The per-token-independent part of an APNs request built from a `Notification`.
struct NotificationTemplate: Sendable {
    static let placeholderToken = try! DeviceToken(validating: String(repeating: "0", count: 64))

    let bundleID: String
    let pushType: APNsPushType
    let priority: APNsPriority?
    let expiration: APNsExpiration
    let collapseID: String?
    let apnsID: APNsID?
    let payload: [UInt8]

    /// - Parameter requestID: the request's id, from which an alert push without a caller collapse id
    ///   gets one (`RequestCollapseID`).
    init(_ notification: Notification, requestID: String) throws(SendRequestDecoder.Rejection) {
        bundleID = notification.bundleID
        pushType = notification.pushType.apnsPushType ?? .alert
        priority = notification.priority == 0 ? nil : APNsPriority(rawValue: Int(notification.priority))
        if let seconds = notification.expiration {
            guard seconds >= 0 else { throw .init("notification.expiration: must be 0 or seconds since the epoch") }
            expiration = seconds == 0 ? .immediately : .at(secondsSinceEpoch: seconds)
        } else {
            expiration = .omitted
        }
        collapseID = RequestCollapseID.collapseID(
            caller: notification.collapseID.isEmpty ? nil : notification.collapseID, pushType: pushType,
            optedOut: notification.noRequestCollapseID, requestID: requestID)
        if notification.apnsID.isEmpty {
            apnsID = nil
        } else {
            do {
                apnsID = try APNsID(validating: notification.apnsID)
            } catch {
                throw .init("notification.apns_id: \(error.message)")
            }
        }
        payload = Array(notification.payload.utf8)
    }

    /// The request for one token; a fresh `apns-id` per token unless the caller set one.
    func request(for token: DeviceToken) -> APNsRequest {
        APNsRequest(
            deviceToken: token, topic: pushType.topic(forBundleID: bundleID), pushType: pushType,
            priority: priority, expiration: expiration, collapseID: collapseID,
            apnsID: apnsID ?? APNsID.random(), payload: payload)
    }

    /// The `Notification` field an APNs validation error is about.
    static func field(for error: APNsError) -> String {
        switch error.reason {
        case .badCollapseId?: "notification.collapse_id"
        case .badPriority?: "notification.priority"
        case .badMessageId?: "notification.apns_id"
        case .badExpirationDate?: "notification.expiration"
        case .missingTopic?, .badTopic?, .topicDisallowed?: "notification.bundle_id"
        default: "notification.payload"
        }
    }
}
