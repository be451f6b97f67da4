import Kafka
import PushMessages

/// What one record of the send-requests topic is, worked out once per record (docs/dispatcher-engine.md
/// "One look at a send-requests record"): its `content-type` is parsed once, its value decoded once and
/// checked, and the dispatcher's handling acts on the result; a send request goes to the processor with
/// the notification template its check built.
///
/// The order is the topic's (docs/contracts.md "Scheduling and cancelling"): a record whose `message=`
/// parameter names `push.v1.ChannelCommand` is a channel command; else a value the Kafka client flagged
/// as too large is refused; else `push.v1.CancelRequest` names a cancel; anything else must be a
/// `SendRequest`.
enum SendRequestsRoute: Sendable {
    /// A `ChannelCommand`, checked (`ChannelCommandDecoder`).
    case channelCommand(ChannelCommand)
    /// A `ChannelCommand` record refused for its content: dead-lettered, with no `RequestCompleted`
    /// (its key is not a request id).
    case refusedChannelCommand(SendRequestDecoder.Rejection)
    /// A `CancelRequest` (`CampaignCancellations.cancelRequest(in:maxBytes:)`).
    case cancel(CancelRequest)
    /// A `SendRequest`, decoded and checked (`SendRequestDecoder`).
    case send(CheckedSendRequest)
    /// A `SendRequest` or `CancelRequest` record refused for its content: dead-lettered, with a
    /// `RequestCompleted` naming the reason when the record has a key.
    case refused(SendRequestDecoder.Rejection)

    /// Routes `message` under `limits` (`IntakeSettings.sendRequestLimits`; `maxBytes` bounds every kind).
    init(_ message: KafkaMessage, limits: SendRequestDecoder.Limits) {
        let header = RecordContentType(of: message)
        do {
            if let command = try ChannelCommandDecoder.channelCommand(in: message, header: header, maxBytes: limits.maxBytes) {
                self = .channelCommand(command)
                return
            }
        } catch {
            self = .refusedChannelCommand(error)
            return
        }
        do {
            self = try Self.cancelOrSend(message, header: header, limits: limits)
        } catch {
            self = .refused(error)
        }
    }

    private static func cancelOrSend(
        _ message: KafkaMessage, header: RecordContentType, limits: SendRequestDecoder.Limits
    ) throws(SendRequestDecoder.Rejection) -> SendRequestsRoute {
        if let bytes = message.oversizedValueBytes { throw SendRequestDecoder.tooLarge(bytes: bytes, maxBytes: limits.maxBytes) }
        if let cancel = try CampaignCancellations.cancelRequest(in: message, header: header, maxBytes: limits.maxBytes) { return .cancel(cancel) }
        return .send(try SendRequestDecoder.decode(message, header: header, limits: limits))
    }
}

/// A `SendRequest` that `SendRequestDecoder` accepted, with what its check built.
struct CheckedSendRequest: Sendable {
    /// The request as decoded (the dispatcher then sets its `trace_parent`).
    var request: SendRequest
    /// The per-token part of its APNs requests, built and validated once by the check; nil for a
    /// broadcast (a `channel_id` target), whose content `BroadcastAdmission` checks.
    let template: NotificationTemplate?
}
