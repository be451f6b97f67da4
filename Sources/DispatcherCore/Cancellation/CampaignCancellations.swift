import Kafka
import ProtobufCodec
import PushMessages
import Synchronization

/// Cancels known to this process, for the check before each send of an immediate request or a
/// campaign page (docs/campaigns.md "Cancellation"): those this process received (inserted on receipt)
/// and those any replica recorded in the `cancellations` table (inserted by `CancellationPoller`).
/// Kept by time, not by count (`CancellationSet`): the poller drops entries older than the send-log
/// retention. The campaign row's `cancel_requested_at_ms`, read on every renewal, is a second path
/// for campaigns.
public final class CampaignCancellations: Sendable {
    private let state = Mutex(CancellationSet())

    /// An empty set.
    public init() {}

    /// Holds `requestID`, recorded at `atMs` (ms since the epoch).
    public func insert(_ requestID: String, atMs: Int64) {
        state.withLock { _ = $0.insert(requestID, atMs: atMs) }
    }

    /// Whether a cancel for `requestID` is known.
    public func contains(_ requestID: String) -> Bool { state.withLock { $0.contains(requestID) } }

    /// The number of request ids held.
    public var count: Int { state.withLock { $0.count } }

    /// Drops the cancels recorded before `cutoffMs` (ms since the epoch).
    /// - Returns: how many were dropped.
    @discardableResult
    public func expire(before cutoffMs: Int64) -> Int { state.withLock { $0.expire(before: cutoffMs) } }

    /// The `CancelRequest` a record carries, when its content type names one
    /// (docs/contracts.md "Scheduling and cancelling"); nil for any other record.
    /// - Throws: `SendRequestDecoder.Rejection` when it names `CancelRequest` but cannot be used
    ///   (undecodable, larger than `maxBytes`, no request id, or a request id other than the record's key).
    public static func cancelRequest(in message: KafkaMessage, maxBytes: Int = SendRequestDecoder.Limits().maxBytes) throws(SendRequestDecoder.Rejection) -> CancelRequest? {
        try cancelRequest(in: message, header: RecordContentType(of: message), maxBytes: maxBytes)
    }

    /// ``cancelRequest(in:maxBytes:)`` with the record's `content-type` parsed already (`SendRequestsRoute`).
    static func cancelRequest(in message: KafkaMessage, header: RecordContentType, maxBytes: Int) throws(SendRequestDecoder.Rejection) -> CancelRequest? {
        guard header.message == CancelRequest.protoMessageName else { return nil }
        guard message.value.count <= maxBytes, message.oversizedValueBytes == nil else {
            throw .init(
                "record value: \(message.oversizedValueBytes ?? message.value.count) bytes; at most \(maxBytes) (PUSH_MAX_SEND_REQUEST_BYTES)",
                reason: "send_request_too_large")
        }
        let contentType = header.text
        let cancel: CancelRequest
        do {
            cancel = header.isJSON
                ? try CancelRequest(jsonUTF8: message.value) : try CancelRequest(protobufBytes: message.value)
        } catch {
            throw .init("undecodable CancelRequest (content-type \"\(contentType)\"): \(error)")
        }
        guard !cancel.requestID.isEmpty else { throw .init("request_id: is required") }
        if let key = message.key, String(decoding: key, as: UTF8.self) != cancel.requestID {
            throw .init("request_id: \"\(cancel.requestID)\" differs from the record's key")
        }
        return cancel
    }
}
