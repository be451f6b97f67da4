import APNs
import Kafka
import ProtobufCodec
import PushMessages

/// Turns a `push.send-requests.v1` record into a checked `SendRequest`, or the reason it goes to
/// the dead-letter topic (naming the field).
public enum SendRequestDecoder {
    /// A record that cannot be sent: why, naming the field.
    public struct Rejection: Error, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    /// Decodes by the record's `content-type` header: proto3 JSON for `application/json`, protobuf
    /// otherwise (the header may be absent).
    /// - Throws: `Rejection` for an undecodable or invalid request.
    public static func decode(_ message: KafkaMessage) throws(Rejection) -> SendRequest {
        let header = RecordContentType(of: message)
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
                request = try SendRequest(jsonUTF8: message.value)
            } else {
                request = try SendRequest(protobufBytes: message.value)
            }
        } catch {
            throw Rejection("undecodable SendRequest (content-type \"\(contentType)\"): \(error)")
        }
        try check(request)
        return request
    }

    /// Checks what the dispatcher needs before any token is looked up.
    /// - Throws: `Rejection` naming the first bad field.
    public static func check(_ request: SendRequest) throws(Rejection) {
        guard !request.requestID.isEmpty else { throw Rejection("request_id: is required") }
        try rejecting { () throws(InvalidFieldError) in try DeviceValidator.checkIdentifier(request.requestID, field: "request_id") }
        guard let target = request.target else { throw Rejection("target: one of device_tokens, user_ids or audience is required") }
        switch target {
        case .deviceTokens(let tokens):
            guard !tokens.deviceTokens.isEmpty else { throw Rejection("device_tokens.device_tokens: is empty") }
        case .userIDs(let users):
            guard !users.userIDs.isEmpty else { throw Rejection("user_ids.user_ids: is empty") }
            for (index, user) in users.userIDs.enumerated() {
                try rejecting { () throws(InvalidFieldError) in try DeviceValidator.checkIdentifier(user, field: "user_ids.user_ids[\(index)]") }
            }
        case .audience:
            break  // checked below, once the notification is (campaigns: AudienceQuery)
        }
        guard let notification = request.notification else { throw Rejection("notification: is required") }
        try rejecting { () throws(InvalidFieldError) in try DeviceValidator.checkBundleID(notification.bundleID, field: "notification.bundle_id") }
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
        if case .audience = target { _ = try AudienceQuery(request) }
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
