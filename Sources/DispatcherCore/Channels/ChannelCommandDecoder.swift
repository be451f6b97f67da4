import Kafka
import ProtobufCodec
import PushDomain
import PushMessages

/// Reads a `ChannelCommand` record of the send-requests topic (docs/contracts.md "Broadcast channels")
/// and checks it, naming the field that is wrong, the way `CampaignCancellations.cancelRequest(in:)`
/// reads a `CancelRequest`: a refused record is dead-lettered like a bad `SendRequest`.
public enum ChannelCommandDecoder {
    /// The `ChannelCommand` a record carries, checked, when its content type names one; nil for any
    /// other record.
    /// - Parameter maxBytes: the largest value accepted, in bytes (`PUSH_MAX_SEND_REQUEST_BYTES`).
    /// - Throws: `SendRequestDecoder.Rejection` naming what is wrong: too large, undecodable, or a field
    ///   `check(_:key:)` refuses.
    public static func channelCommand(in message: KafkaMessage, maxBytes: Int = SendRequestDecoder.Limits().maxBytes) throws(SendRequestDecoder.Rejection) -> ChannelCommand? {
        try channelCommand(in: message, header: RecordContentType(of: message), maxBytes: maxBytes)
    }

    /// ``channelCommand(in:maxBytes:)`` with the record's `content-type` parsed already (`SendRequestsRoute`).
    static func channelCommand(in message: KafkaMessage, header: RecordContentType, maxBytes: Int) throws(SendRequestDecoder.Rejection) -> ChannelCommand? {
        guard header.message == ChannelCommand.protoMessageName else { return nil }
        guard message.value.count <= maxBytes, message.oversizedValueBytes == nil else {
            throw .init(
                "record value: \(message.oversizedValueBytes ?? message.value.count) bytes; at most \(maxBytes) (PUSH_MAX_SEND_REQUEST_BYTES)",
                reason: "send_request_too_large")
        }
        let command: ChannelCommand
        do {
            command = header.isJSON ? try ChannelCommand(jsonUTF8: message.value) : try ChannelCommand(protobufBytes: message.value)
        } catch {
            throw .init("undecodable ChannelCommand (content-type \"\(header.text)\"): \(error)", reason: "invalid_channel_command")
        }
        do {
            try check(command, key: message.key.map { String(decoding: $0, as: UTF8.self) })
        } catch {
            throw .init(error.description, reason: "invalid_channel_command")
        }
        return command
    }

    /// Checks a command's fields, in this order: `action` set, `bundle_id` (Apple's rule for bundle ids,
    /// no push-type suffix), `environment` specified, `name` 1 to 128 letters, digits and "._-:",
    /// `delete_after_ms` not negative, and the record key (when there is one) equal to
    /// `<bundle_id>/<environment>/<name>`.
    /// - Throws: `InvalidFieldError` naming the first wrong field.
    public static func check(_ command: ChannelCommand, key: String?) throws(InvalidFieldError) {
        guard command.action == .create || command.action == .delete else {
            throw InvalidFieldError("action", "is required: CREATE or DELETE")
        }
        try DeviceValidator.checkBundleID(command.bundleID, field: "bundle_id")
        guard !command.bundleID.contains(".push-type.") else {
            throw InvalidFieldError("bundle_id", "\"\(command.bundleID.prefix(80))\" has a push-type suffix; channels belong to the bare bundle id")
        }
        guard command.environment == .production || command.environment == .sandbox else {
            throw InvalidFieldError("environment", "is required: PRODUCTION or SANDBOX (a channel exists in one environment)")
        }
        try ChannelCommand.checkName(command.name)
        guard command.deleteAfterMs >= 0 else {
            throw InvalidFieldError("delete_after_ms", "\(command.deleteAfterMs) is negative")
        }
        if let key {
            let expected = command.recordKey
            guard key == expected else {
                throw InvalidFieldError("key", "\"\(key.prefix(300))\" differs from \"\(expected)\" (<bundle_id>/<environment>/<name>)")
            }
        }
    }
}
