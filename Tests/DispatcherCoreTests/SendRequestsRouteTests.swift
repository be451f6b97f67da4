import Kafka
import PushMessages
import Testing

@testable import DispatcherCore

/// What a record of the send-requests topic is, worked out once per record (`SendRequestsRoute`):
/// content type × header and body → the route, or the refusal the dispatcher dead-letters, with the
/// same reasons and texts as the record's handling had when it parsed the content type three times
/// (channel command, cancel, send request) and built the notification template twice (check, process).
/// No I/O.
@Suite struct SendRequestsRouteTests {
    static let limits = SendRequestDecoder.Limits(maxBytes: 4_096, maxTokens: 3)
    static let token = String(repeating: "5a", count: 32)

    /// What a record came to, comparable between the old sequence of decoders and the route.
    enum Observed: Equatable, CustomStringConvertible {
        case send(requestID: String)
        case cancel(requestID: String)
        case channelCommand(name: String)
        /// A send request or cancel refused: dead-lettered, and a RequestCompleted when keyed.
        case refused(reason: String, text: String)
        /// A channel command refused: dead-lettered only.
        case refusedChannelCommand(reason: String, text: String)

        var description: String {
            switch self {
            case .send(let id): "send \(id)"
            case .cancel(let id): "cancel \(id)"
            case .channelCommand(let name): "channel command \(name)"
            case .refused(let reason, let text): "refused \(reason): \(text)"
            case .refusedChannelCommand(let reason, let text): "refused channel command \(reason): \(text)"
            }
        }

        /// Whether `self` (observed) matches `expected`, whose refusal text is a prefix.
        func matches(_ expected: Observed) -> Bool {
            switch (self, expected) {
            case (.refused(let reason, let text), .refused(let wantedReason, let prefix)),
                 (.refusedChannelCommand(let reason, let text), .refusedChannelCommand(let wantedReason, let prefix)):
                reason == wantedReason && text.hasPrefix(prefix)
            default:
                self == expected
            }
        }
    }

    /// One row: a record and what it must come to.
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let contentType: String?
        let value: [UInt8]
        var key: String? = "r-1"
        var oversizedValueBytes: Int?
        let expected: Observed
        /// For a send: whether the route carries the notification template (every target but a channel's).
        var template = true

        var testDescription: String { name }

        var message: KafkaMessage {
            var message = KafkaMessage(
                topic: "push.send-requests.v1", partition: 0, offset: 1, key: key.map { Array($0.utf8) }, value: value,
                headers: contentType.map { [KafkaHeader(name: "content-type", value: $0)] } ?? [], timestamp: nil)
            message.oversizedValueBytes = oversizedValueBytes
            return message
        }
    }

    static func send(_ edit: (inout SendRequest) -> Void = { _ in }) -> SendRequest {
        RecordCheckTests.sendRequest {
            $0.target = .deviceTokens(DeviceTokens(deviceTokens: [token]))
            edit(&$0)
        }
    }

    static let cancel = CancelRequest(requestID: "r-1", reason: "operator")
    static let command = ChannelLifecycleTests.command(.create)

    static let protobuf = "application/x-protobuf"
    static let sendType = SendRequest.protobufContentType
    static let cancelType = "application/x-protobuf; message=push.v1.CancelRequest"
    static let commandType = "application/x-protobuf; message=push.v1.ChannelCommand"
    static let commandKey = ChannelCommand.recordKey(bundleID: command.bundleID, environment: command.environment, name: command.name)
    static let broadcast = send { $0.target = .channelID("AbCd+/=="); $0.notification?.pushType = .liveactivity }

    static let rows: [Row] = [
        // Send requests: the content type's media type and message parameter.
        Row(name: "no content-type, protobuf", contentType: nil, value: send().serializedBytes(), expected: .send(requestID: "r-1")),
        Row(name: "bare protobuf media type", contentType: protobuf, value: send().serializedBytes(), expected: .send(requestID: "r-1")),
        Row(name: "protobuf naming SendRequest", contentType: sendType, value: send().serializedBytes(), expected: .send(requestID: "r-1")),
        Row(name: "JSON naming SendRequest", contentType: "application/json; message=push.v1.SendRequest", value: send().jsonUTF8Bytes(),
            expected: .send(requestID: "r-1")),
        Row(name: "bare JSON", contentType: "application/json", value: send().jsonUTF8Bytes(), expected: .send(requestID: "r-1")),
        Row(name: "JSON, other case and a charset", contentType: " Application/JSON ; charset=utf-8", value: send().jsonUTF8Bytes(),
            expected: .send(requestID: "r-1")),
        Row(name: "a broadcast: no template", contentType: sendType, value: broadcast.serializedBytes(), expected: .send(requestID: "r-1"),
            template: false),
        Row(name: "another media type", contentType: "text/plain", value: send().serializedBytes(),
            expected: .refused(reason: "invalid_send_request", text: "content-type: \"text/plain\" is neither application/json nor")),
        Row(name: "another message", contentType: "application/x-protobuf; message=push.v1.TokenEvent", value: send().serializedBytes(),
            expected: .refused(reason: "invalid_send_request", text: "content-type: \"application/x-protobuf; message=push.v1.TokenEvent\" names another message")),
        Row(name: "message names are case-sensitive", contentType: "application/json; message=push.v1.sendrequest", value: send().jsonUTF8Bytes(),
            expected: .refused(reason: "invalid_send_request", text: "content-type: \"application/json; message=push.v1.sendrequest\" names another message")),
        Row(name: "JSON header, protobuf body", contentType: "application/json", value: send().serializedBytes(),
            expected: .refused(reason: "invalid_send_request", text: "undecodable SendRequest (content-type \"application/json\")")),
        Row(name: "protobuf header, bad framing", contentType: sendType, value: [0x0A, 0x7F, 0x01],
            expected: .refused(reason: "invalid_send_request", text: "undecodable SendRequest")),
        Row(name: "no request id", contentType: sendType, value: send { $0.requestID = "" }.serializedBytes(),
            expected: .refused(reason: "invalid_send_request", text: "request_id: is required")),
        Row(name: "a notification Apple refuses", contentType: sendType, value: send { $0.notification?.payload = "[]" }.serializedBytes(),
            expected: .refused(reason: "invalid_send_request", text: "notification.payload:")),
        Row(name: "larger than the limit", contentType: sendType, value: send { $0.notification?.payload = "{\"a\":\"\(String(repeating: "x", count: 5_000))\"}" }.serializedBytes(),
            expected: .refused(reason: "send_request_too_large", text: "record value: ")),
        Row(name: "too large for the Kafka client", contentType: sendType, value: [], oversizedValueBytes: 9_999,
            expected: .refused(reason: "send_request_too_large", text: "record value: 9999 bytes (after the Kafka client decompressed it); at most 4096")),
        Row(name: "too many tokens, protobuf", contentType: sendType,
            value: send { $0.target = .deviceTokens(DeviceTokens(deviceTokens: Array(repeating: token, count: 4))) }.serializedBytes(),
            expected: .refused(reason: "too_many_tokens", text: "target: more than 3 device tokens")),
        Row(name: "too many tokens, JSON", contentType: "application/json",
            value: send { $0.target = .userIDs(UserIds(userIDs: ["a", "b", "c", "d"])) }.jsonUTF8Bytes(),
            expected: .refused(reason: "too_many_tokens", text: "target: more than 3 device tokens")),
        // Cancels: the message parameter decides, whatever the media type.
        Row(name: "cancel, protobuf", contentType: cancelType, value: cancel.serializedBytes(), expected: .cancel(requestID: "r-1")),
        Row(name: "cancel, JSON", contentType: "application/json; message=push.v1.CancelRequest", value: cancel.jsonUTF8Bytes(),
            expected: .cancel(requestID: "r-1")),
        Row(name: "cancel under another media type", contentType: "text/plain; message=push.v1.CancelRequest", value: cancel.serializedBytes(),
            expected: .cancel(requestID: "r-1")),
        Row(name: "cancel keyed by another request", contentType: cancelType, value: cancel.serializedBytes(), key: "r-2",
            expected: .refused(reason: "invalid_send_request", text: "request_id: \"r-1\" differs from the record's key")),
        Row(name: "cancel without request id", contentType: cancelType, value: CancelRequest().serializedBytes(),
            expected: .refused(reason: "invalid_send_request", text: "request_id: is required")),
        Row(name: "cancel, undecodable", contentType: "application/json; message=push.v1.CancelRequest", value: Array("{".utf8),
            expected: .refused(reason: "invalid_send_request", text: "undecodable CancelRequest")),
        Row(name: "cancel too large for the Kafka client", contentType: cancelType, value: [], oversizedValueBytes: 9_999,
            expected: .refused(reason: "send_request_too_large", text: "record value: 9999 bytes (after the Kafka client decompressed it)")),
        // Channel commands: refused without a RequestCompleted.
        Row(name: "channel command, protobuf", contentType: commandType, value: command.serializedBytes(), key: commandKey,
            expected: .channelCommand(name: "match-8812")),
        Row(name: "channel command, JSON", contentType: "application/json; message=push.v1.ChannelCommand", value: command.jsonUTF8Bytes(),
            key: commandKey, expected: .channelCommand(name: "match-8812")),
        Row(name: "channel command under another key", contentType: commandType, value: command.serializedBytes(), key: "other",
            expected: .refusedChannelCommand(reason: "invalid_channel_command", text: "key:")),
        Row(name: "channel command, undecodable", contentType: commandType, value: [0x0A, 0x7F], key: commandKey,
            expected: .refusedChannelCommand(reason: "invalid_channel_command", text: "undecodable ChannelCommand")),
        Row(name: "channel command too large for the Kafka client", contentType: commandType, value: [], key: commandKey, oversizedValueBytes: 9_999,
            expected: .refusedChannelCommand(reason: "send_request_too_large", text: "record value: 9999 bytes; at most 4096")),
    ]

    /// The dispatcher's handling before the route: channel command, then the Kafka client's size
    /// flag, then cancel, then send request, each decoder parsing the content type again.
    static func sequence(_ message: KafkaMessage) -> Observed {
        do {
            if let command = try ChannelCommandDecoder.channelCommand(in: message, maxBytes: limits.maxBytes) { return .channelCommand(name: command.name) }
        } catch {
            return .refusedChannelCommand(reason: error.reason, text: error.description)
        }
        do {
            if let bytes = message.oversizedValueBytes {
                throw SendRequestDecoder.Rejection(
                    "record value: \(bytes) bytes (after the Kafka client decompressed it); at most \(limits.maxBytes) (PUSH_MAX_SEND_REQUEST_BYTES)",
                    reason: "send_request_too_large")
            }
            if let cancel = try CampaignCancellations.cancelRequest(in: message, maxBytes: limits.maxBytes) { return .cancel(requestID: cancel.requestID) }
            return .send(requestID: try SendRequestDecoder.decode(message, limits: limits).requestID)
        } catch let error as SendRequestDecoder.Rejection {
            return .refused(reason: error.reason, text: error.description)
        } catch {
            return .refused(reason: "unexpected", text: "\(error)")
        }
    }

    static func route(_ message: KafkaMessage) -> (Observed, hasTemplate: Bool) {
        switch SendRequestsRoute(message, limits: limits) {
        case .send(let checked): (.send(requestID: checked.request.requestID), checked.template != nil)
        case .cancel(let cancel): (.cancel(requestID: cancel.requestID), false)
        case .channelCommand(let command): (.channelCommand(name: command.name), false)
        case .refused(let error): (.refused(reason: error.reason, text: error.description), false)
        case .refusedChannelCommand(let error): (.refusedChannelCommand(reason: error.reason, text: error.description), false)
        }
    }

    @Test(arguments: rows)
    func aRecordComesToOneRoute(_ row: Row) {
        let before = Self.sequence(row.message)
        #expect(before.matches(row.expected), "before: \(before)")
        let (route, hasTemplate) = Self.route(row.message)
        #expect(route == before, "route: \(route)")
        if case .send = row.expected { #expect(hasTemplate == row.template) }
    }

    /// The template the route carries is the one the processor would build from the request.
    @Test func theTemplateIsTheRequestsOwn() throws {
        let row = try #require(Self.rows.first { $0.name == "JSON naming SendRequest" })
        guard case .send(let checked) = SendRequestsRoute(row.message, limits: Self.limits) else {
            Issue.record("not routed as a send")
            return
        }
        let template = try #require(checked.template)
        let notification = try #require(checked.request.notification)
        let built = try NotificationTemplate(notification, requestID: checked.request.requestID)
        #expect(template.bundleID == built.bundleID && template.pushType == built.pushType && template.payload == built.payload)
        #expect(template.collapseID == built.collapseID && template.expiration == built.expiration && template.priority == built.priority)
    }
}

