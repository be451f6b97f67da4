import Kafka
import ProtobufCodec
import PushMessages
import Synchronization

/// Cancels seen by this process, for the runner's check before each send (the durable flag is the
/// campaign row's `cancel_requested_at_ms`, read on every renewal). Keeps the last `capacity` ids.
public final class CampaignCancellations: Sendable {
    private struct State {
        var ids: Set<String> = []
        var order: [String] = []
    }
    private let state = Mutex(State())
    private let capacity: Int

    public init(capacity: Int = 10_000) { self.capacity = capacity }

    public func insert(_ requestID: String) {
        state.withLock { state in
            guard state.ids.insert(requestID).inserted else { return }
            state.order.append(requestID)
            if state.order.count > capacity { state.ids.remove(state.order.removeFirst()) }
        }
    }

    public func contains(_ requestID: String) -> Bool { state.withLock { $0.ids.contains(requestID) } }

    /// The `CancelRequest` a record carries, when its content type names one
    /// (docs/contracts.md "Scheduling and cancelling"); nil for any other record.
    /// - Throws: `SendRequestDecoder.Rejection` when it names `CancelRequest` but cannot be used
    ///   (undecodable, larger than `maxBytes`, no request id, or a request id other than the record's key).
    public static func cancelRequest(in message: KafkaMessage, maxBytes: Int = SendRequestDecoder.Limits().maxBytes) throws(SendRequestDecoder.Rejection) -> CancelRequest? {
        let header = RecordContentType(of: message)
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
