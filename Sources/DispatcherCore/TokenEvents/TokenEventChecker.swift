import Kafka
import PushDomain
import PushMessages

/// Checks a `push.token-events.v1` record before it may change the token table. The registration
/// service already validates what it publishes, but anything that can produce to the topic can
/// write it, and a bad event applied once would stick: an event time in the future would win over
/// every later event of the token.
public enum TokenEventChecker {
    /// How far ahead of this dispatcher's clock an event time may be (clock skew between replicas).
    public static let maximumClockSkewMs: Int64 = 5 * 60 * 1000

    /// The decoded event with its device normalized.
    /// - Throws: `InvalidFieldError` naming the field, or the decoding error.
    public static func checked(_ message: KafkaMessage, nowMs: Int64) throws -> TokenEvent {
        if message.header("content-type") != nil {
            let header = RecordContentType(of: message)
            if !header.isProtobuf || (header.message.map { $0 != TokenEvent.protoMessageName } ?? false) {
                throw InvalidFieldError("content-type", "\"\(header.text)\" is not \(TokenEvent.protobufContentType)")
            }
        }
        var event = try TokenEvent(protobufBytes: message.value)
        guard let device = event.device else { throw InvalidFieldError("device", "is required") }
        guard event.eventTimeMs > 0 else { throw InvalidFieldError("event_time_ms", "is required") }
        guard event.eventTimeMs <= nowMs + maximumClockSkewMs else {
            throw InvalidFieldError("event_time_ms", "\(event.eventTimeMs - nowMs) ms in the future")
        }
        switch event.action {
        case .registered:
            let normalized = try DeviceValidator.normalized(device)
            event.device = normalized
            if !event.previousToken.isEmpty {
                event.previousToken = try DeviceValidator.normalizedToken(event.previousToken, field: "previous_token")
                guard event.previousToken != normalized.deviceToken else {
                    throw InvalidFieldError("previous_token", "is the same token as device.device_token")
                }
            }
        case .unregistered:
            var normalized = device
            normalized.deviceToken = try DeviceValidator.normalizedToken(device.deviceToken, field: "device.device_token")
            try DeviceValidator.checkBundleID(device.bundleID, field: "device.bundle_id")
            event.device = normalized
        case .userForgotten:
            try DeviceValidator.checkBundleID(device.bundleID, field: "device.bundle_id")
            // The registration service's rule for every user id (ForgetUser and RegisterToken alike).
            try DeviceValidator.checkUserID(device.userID, field: "device.user_id", required: true)
            guard device.deviceToken.isEmpty else { throw InvalidFieldError("device.device_token", "must be empty for USER_FORGOTTEN") }
            let expected = "user:\(device.bundleID):\(device.userID)"
            if let key = message.key, String(decoding: key, as: UTF8.self) != expected {
                throw InvalidFieldError("key", "the record key of USER_FORGOTTEN must be \(expected)")
            }
            return event
        default:
            throw InvalidFieldError("action", "must be REGISTERED, UNREGISTERED or USER_FORGOTTEN")
        }
        if let key = message.key, let token = event.device?.deviceToken, String(decoding: key, as: UTF8.self) != token {
            // Keyed by another token, the event could be applied out of order with that token's events.
            throw InvalidFieldError("key", "the record key must be the normalized device token \(token)")
        }
        return event
    }
}
