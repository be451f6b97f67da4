import HTTP2
import ProtobufCodec
import Synchronization

/// Writes the responses of a streaming call. The first `send` starts the response (HEADERS); the
/// call ends when the handler returns or throws (trailers), or earlier with `finish`.
public final class GRPCResponseWriter: Sendable {
    private let responder: HTTP2Responder
    private let state = Mutex((started: false, finished: false))

    init(responder: HTTP2Responder) { self.responder = responder }

    /// Sends one response message; ignored once the call finished.
    public func send<M: ProtobufMessage>(_ message: M) {
        let start = state.withLock { state -> Bool? in
            if state.finished { return nil }
            defer { state.started = true }
            return !state.started
        }
        guard let start else { return }
        if start { responder.startStreaming(status: 200, headers: [HTTP2Header("content-type", "application/grpc")]) }
        responder.send(GRPCWire.frame(message.serializedBytes()))
    }

    /// Ends the call with `status` (OK by default); later calls and sends are ignored.
    /// - Returns: false when the call had already ended.
    @discardableResult
    public func finish(_ status: GRPCStatus = GRPCStatus(.ok)) -> Bool {
        let started = state.withLock { state -> Bool? in
            if state.finished { return nil }
            state.finished = true
            return state.started
        }
        guard let started else { return false }
        if started {
            var trailers = [HTTP2Header("grpc-status", String(status.code.rawValue))]
            if !status.message.isEmpty { trailers.append(HTTP2Header("grpc-message", GRPCWire.percentEncode(status.message))) }
            responder.finish(trailers: trailers)
        } else {
            GRPCServer.respondTrailersOnly(responder, status)
        }
        return true
    }
}
