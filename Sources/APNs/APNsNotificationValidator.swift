import ProtobufCodec
import PushDomain

/// Checks an ``APNsRequest`` before it is sent, so a notification APNs would refuse fails at once with
/// Apple's reason instead of costing a round trip (4xx responses also cut throughput,
/// docs/apns-protocol.md §3).
///
/// Checks that mirror APNs (each throws `APNsError` `.invalidRequest` with Apple's reason):
/// empty body → `PayloadEmpty`; more than 4096 bytes (5120 for `voip`) of the exact body bytes →
/// `PayloadTooLarge`; empty topic → `MissingTopic`; priority not 10/5/1, or a `background` push not at
/// 5 → `BadPriority`; collapse ID empty or over 64 UTF-8 bytes → `BadCollapseId`; negative expiration →
/// `BadExpirationDate`. (`BadMessageId` and `BadDeviceToken` are refused when ``APNsID`` and
/// ``DeviceToken`` are built.)
///
/// Checks of our own (Apple documents the rule but not a reason; `reason` is `nil`): the body must be
/// UTF-8 JSON whose top level is an object (`.invalidRequest`); with `checksPayloadAgainstPushType`
/// the payload must suit the push type (`.payloadDoesNotMatchPushType`, naming the key); with
/// `checksTopicAgainstPushType` the topic must carry the push type's suffix
/// (`.topicDoesNotMatchPushType`).
public struct APNsNotificationValidator: Sendable {
    /// Whether the payload must suit the push type (docs/apns-protocol.md §7 and §8).
    public var checksPayloadAgainstPushType: Bool
    /// Whether `apns-topic` must end with the push type's suffix (and alert/background with none).
    public var checksTopicAgainstPushType: Bool

    /// Creates a validator; both consistency checks are on by default.
    public init(checksPayloadAgainstPushType: Bool = true, checksTopicAgainstPushType: Bool = true) {
        self.checksPayloadAgainstPushType = checksPayloadAgainstPushType
        self.checksTopicAgainstPushType = checksTopicAgainstPushType
    }

    /// A validator with only the checks APNs itself makes (for the simulator).
    public static let appleChecksOnly = APNsNotificationValidator(
        checksPayloadAgainstPushType: false, checksTopicAgainstPushType: false)

    /// Checks `request`.
    /// - Throws: `APNsError` as described on the type; the message says what is wrong, with sizes.
    public func validate(_ request: APNsRequest) throws(APNsError) {
        let type = request.pushType
        let size = request.payload.count
        guard size > 0 else { throw .rejected(.payloadEmpty, "the payload is empty") }
        guard size <= type.maximumPayloadBytes else {
            throw .rejected(.payloadTooLarge, "the payload is \(size) bytes; the \(type) push type allows at most \(type.maximumPayloadBytes) bytes (UTF-8 bytes of the body, not characters)")
        }
        guard !request.topic.isEmpty else { throw .rejected(.missingTopic, "apns-topic is empty") }
        let priority = request.effectivePriority
        guard priority.isValid else {
            throw .rejected(.badPriority, "apns-priority \(priority.rawValue) is not 10, 5 or 1")
        }
        if type == .background, priority != .consideringDevicePower {
            throw .rejected(.badPriority, "a background push must use apns-priority 5, not \(priority.rawValue)")
        }
        if let collapseID = request.collapseID {
            let bytes = collapseID.utf8.count
            guard bytes > 0 else { throw .rejected(.badCollapseId, "apns-collapse-id is empty") }
            guard bytes <= 64 else {
                throw .rejected(.badCollapseId, "apns-collapse-id is \(bytes) bytes (\(collapseID.count) characters); at most 64 UTF-8 bytes are allowed")
            }
        }
        if case .at(let seconds) = request.expiration, seconds < 0 {
            throw .rejected(.badExpirationDate, "apns-expiration \(seconds) is negative")
        }
        let root = try Self.parseObject(request.payload)
        if checksTopicAgainstPushType { try Self.checkTopic(request.topic, type) }
        if checksPayloadAgainstPushType { try Self.checkPayload(root, type) }
    }

    private static func parseObject(_ payload: [UInt8]) throws(APNsError) -> JSONObject {
        guard String(validating: payload, as: UTF8.self) != nil else {
            throw APNsError(code: .invalidRequest, message: "the payload is not valid UTF-8")
        }
        let value: JSONValue
        do { value = try JSONValue(parsing: payload) } catch {
            throw APNsError(code: .invalidRequest, message: "the payload is not valid JSON: \(error.description)")
        }
        guard case .object(let root) = value else {
            throw APNsError(code: .invalidRequest, message: "the payload must be a JSON object")
        }
        if let aps = root["aps"] {
            guard case .object = aps else {
                throw APNsError(code: .invalidRequest, message: "\"aps\" must be a JSON object")
            }
        }
        return root
    }

    private static func checkTopic(_ topic: String, _ type: APNsPushType) throws(APNsError) {
        let suffix = type.topicSuffix
        if !suffix.isEmpty {
            guard topic.hasSuffix(suffix), topic.utf8.count > suffix.utf8.count else {
                throw APNsError(code: .topicDoesNotMatchPushType, message: "the \(type) push type needs a topic ending in \"\(suffix)\", got \"\(topic)\"")
            }
        } else if type != .mdm,
                  let other = APNsPushType.allCases.first(where: { !$0.topicSuffix.isEmpty && topic.hasSuffix($0.topicSuffix) }) {
            throw APNsError(code: .topicDoesNotMatchPushType, message: "the \(type) push type goes to the bare bundle ID, but topic \"\(topic)\" ends in the \(other) suffix \"\(other.topicSuffix)\"")
        }
    }

    private static func checkPayload(_ root: JSONObject, _ type: APNsPushType) throws(APNsError) {
        func mismatch(_ message: String) -> APNsError {
            APNsError(code: .payloadDoesNotMatchPushType, message: message)
        }
        var aps = JSONObject()
        if case .object(let object)? = root["aps"] { aps = object }
        let userVisible = ["alert", "badge", "sound"].filter { aps[$0] != nil }
        switch type {
        case .background:
            if let key = userVisible.first {
                throw mismatch("a background push must not contain aps.\(key); a payload with alert, badge or sound is an alert push")
            }
            guard aps["content-available"]?.integerValue == 1 else {
                throw mismatch("a background push needs aps.content-available = 1")
            }
        case .alert:
            guard !userVisible.isEmpty else {
                throw mismatch("an alert push needs aps.alert, aps.badge or aps.sound (with only content-available it is a background push)")
            }
        case .widgets:
            guard aps["content-changed"] == .bool(true) else {
                throw mismatch("a widgets push needs aps.content-changed = true")
            }
        case .liveactivity:
            guard case .string(let event)? = aps["event"] else {
                throw mismatch("a liveactivity push needs aps.event (\"start\", \"update\" or \"end\")")
            }
            switch event {
            case "start":
                for key in ["attributes-type", "attributes", "alert"] where aps[key] == nil {
                    throw mismatch("a liveactivity start push needs aps.\(key)")
                }
            case "update":
                guard aps["content-state"] != nil else { throw mismatch("a liveactivity update push needs aps.content-state") }
            case "end":
                break
            default:
                throw mismatch("aps.event \"\(event)\" is not \"start\", \"update\" or \"end\"")
            }
        case .mdm:
            guard case .string? = root["mdm"] else {
                throw mismatch("an mdm push needs the device's PushMagic string in the top-level \"mdm\" key")
            }
        case .voip, .complication, .fileprovider, .location, .pushtotalk, .controls:
            break
        }
    }
}
