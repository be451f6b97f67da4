import Foundation
import HTTP2
import ProtobufCodec
import ServiceCore
import Synchronization

/// What a unary handler knows about its call.
public struct GRPCContext: Sendable {
    /// The full method path, `/package.Service/Method`.
    public var path: String
    /// Request metadata: the HTTP/2 header fields in order, without pseudo-headers and without the
    /// gRPC transport fields (`content-type`, `te`, `grpc-timeout`, `grpc-encoding`, `grpc-accept-encoding`).
    public var metadata: [HTTP2Header]
    /// When the call's `grpc-timeout` runs out (nil: no deadline). The server answers
    /// DEADLINE_EXCEEDED then and cancels the handler's task.
    public var deadline: ContinuousClock.Instant?
    /// The HTTP/2 connection the call arrived on (id, remote address, verified client certificate).
    public var connection: HTTP2ServerConnection
}

/// Routes for a `GRPCServer`: unary methods by path, and a fallback for non-gRPC requests.
public struct GRPCRouter: Sendable {
    /// A unary method: the request message's bytes in, the response message's bytes out. Throw
    /// `GRPCStatus` to end the call with that status; any other error becomes UNKNOWN.
    public typealias UnaryHandler = @Sendable (_ request: [UInt8], _ context: GRPCContext) async throws -> [UInt8]

    /// A streaming method, buffered on the request side: every request message of the call (the
    /// client half-closed), then responses written through the writer as they are produced. Serves
    /// server-streaming calls (one request) and bidirectional ones whose client sends all requests
    /// before reading (server reflection's clients do). Throw `GRPCStatus` to end with that status;
    /// returning normally ends with OK. The task is cancelled when the client goes away.
    public typealias StreamingHandler = @Sendable (_ requests: [[UInt8]], _ context: GRPCContext, _ responses: GRPCResponseWriter) async throws -> Void

    enum Route: Sendable {
        case unary(UnaryHandler)
        case streaming(StreamingHandler, singleRequest: Bool)
    }

    var routes: [String: Route] = [:]
    /// Answers requests whose `content-type` is not `application/grpc…` (for example JSON over HTTP/2
    /// on `/v1/…`): run as a call of the server's (`GRPCServer.serve()`), its response is sent. When
    /// nil, such requests get HTTP 415.
    public typealias Fallback = @Sendable (_ request: HTTP2ServerRequest) async -> HTTP2ServerResponse

    /// See `Fallback`.
    public var fallback: Fallback?

    /// An empty router.
    public init() {}

    /// Registers `handler` for `/service/method` (`service` is fully qualified: `push.v1.Registration`).
    public mutating func register(service: String, method: String, _ handler: @escaping UnaryHandler) {
        routes["/\(service)/\(method)"] = .unary(handler)
    }

    /// Registers a unary method by its generated descriptor: the path and message types come from
    /// `method`; an undecodable request gets INVALID_ARGUMENT naming the message.
    public mutating func register<Method: ProtobufRPCMethod>(
        _ method: Method.Type, _ handler: @escaping @Sendable (Method.Input, GRPCContext) async throws -> Method.Output
    ) {
        precondition(!method.isClientStreaming && !method.isServerStreaming, "\(method.path) is a streaming method")
        routes[method.path] = .unary { bytes, context in
            let request = try Self.decode(Method.Input.self, bytes)
            return try await handler(request, context).serializedBytes()
        }
    }

    /// Registers a unary method by its generated descriptor whose handler gets the request message's
    /// bytes undecoded, so that it can check the call's credentials before it parses anything the
    /// caller sent (decode with `GRPCRouter.decode(_:_:)`).
    public mutating func register<Method: ProtobufRPCMethod>(
        undecoded method: Method.Type, _ handler: @escaping @Sendable ([UInt8], GRPCContext) async throws -> Method.Output
    ) {
        precondition(!method.isClientStreaming && !method.isServerStreaming, "\(method.path) is a streaming method")
        routes[method.path] = .unary { bytes, context in try await handler(bytes, context).serializedBytes() }
    }

    /// Registers a streaming method by its generated descriptor (see `StreamingHandler`): a
    /// server-streaming method gets exactly one request (else INTERNAL, as gRPC answers a unary
    /// request stream with more than one message), a bidirectional one every request of the call.
    public mutating func registerStreaming<Method: ProtobufRPCMethod>(
        _ method: Method.Type,
        _ handler: @escaping @Sendable (_ requests: [Method.Input], _ context: GRPCContext, _ responses: GRPCResponseWriter) async throws -> Void
    ) {
        precondition(method.isServerStreaming, "\(method.path) is not a streaming method")
        routes[method.path] = .streaming({ messages, context, writer in
            var requests: [Method.Input] = []
            requests.reserveCapacity(messages.count)
            for bytes in messages { requests.append(try Self.decode(Method.Input.self, bytes)) }
            try await handler(requests, context, writer)
        }, singleRequest: !method.isClientStreaming)
    }

    /// The method paths served, in no particular order.
    public var paths: [String] { Array(routes.keys) }

    /// Decodes a request message.
    /// - Throws: `GRPCStatus` INVALID_ARGUMENT naming the message and the decoding error.
    public static func decode<M: ProtobufMessage>(_ type: M.Type, _ bytes: [UInt8]) throws(GRPCStatus) -> M {
        do {
            return try M(protobufBytes: bytes)
        } catch {
            throw GRPCStatus(.invalidArgument, "undecodable \(M.protoMessageName): \(error)")
        }
    }
}

/// A gRPC server for unary calls over `HTTP2Server` (TLS or h2c), following
/// https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md: one length-prefixed message in,
/// response HEADERS + DATA + trailers (`grpc-status`, `grpc-message`) out, errors as trailers-only
/// responses, `grpc-timeout` enforced, compression refused, unknown methods UNIMPLEMENTED.
public final class GRPCServer: Sendable {
    /// Server configuration.
    public struct Configuration: Sendable {
        /// The HTTP/2 server underneath (address, TLS, SETTINGS, threads).
        public var http2: HTTP2Server.Configuration
        /// Largest request message accepted, in bytes; larger ones get RESOURCE_EXHAUSTED. Default 4 MiB.
        public var maxReceiveMessageSize: Int = 4 << 20

        /// Creates a configuration.
        public init(http2: HTTP2Server.Configuration = .init(), maxReceiveMessageSize: Int = 4 << 20) {
            self.http2 = http2
            self.maxReceiveMessageSize = maxReceiveMessageSize
        }
    }

    /// One call's work, run by `serve()`.
    typealias Call = @Sendable () async -> Void

    private let server: HTTP2Server
    private let calls: CallQueue<Call>

    /// The bound TCP port.
    public var port: Int { server.port }

    private init(server: HTTP2Server, calls: CallQueue<Call>) {
        self.server = server
        self.calls = calls
    }

    /// Starts accepting connections for `router`. Calls wait until `serve()` runs them.
    /// - Throws: `HTTP2Error` when the HTTP/2 server cannot start (bind, TLS files).
    public static func start(configuration: Configuration, router: GRPCRouter) throws -> GRPCServer {
        let maxSize = configuration.maxReceiveMessageSize
        var http2 = configuration.http2
        // A body that can hold the largest message (and its 5-byte prefix) reaches the handler, which
        // answers RESOURCE_EXHAUSTED for a larger message; the HTTP/2 limit refuses beyond it.
        http2.limits.maxRequestBodyBytes = max(http2.limits.maxRequestBodyBytes, maxSize + 5)
        let plainLimitResponse = http2.limitResponse
        http2.limitResponse = { breach, request in
            guard isGRPCContentType(request.headers.first("content-type") ?? "") else { return plainLimitResponse(breach, request) }
            return trailersOnly(GRPCStatus(limitStatusCode(breach.limit), breach.message))
        }
        let calls = CallQueue<Call>()
        let server = try HTTP2Server.start(configuration: http2) { request, responder in
            GRPCServer.handle(request, responder, router: router, maxSize: maxSize, calls: calls)
        }
        return GRPCServer(server: server, calls: calls)
    }

    /// Runs the calls until `shutdown` or `close` ended the server: each call's handler (and the
    /// fallback's) is a child task of this call's task group, beside the call's deadline
    /// (`grpc-timeout`) and, for a streaming call, the client going away; whichever ends first ends
    /// the call and cancels the others. Once the server ended, calls still running are cancelled, and
    /// `serve` returns when they ended. Call it once, beside the code that shuts the server down.
    public func serve() async {
        await calls.serve { call in await call() }
    }

    /// Stops accepting, lets calls in progress finish for up to `gracePeriod`, then closes and ends
    /// `serve()`.
    public func shutdown(gracePeriod: Duration = .seconds(5)) async {
        await server.shutdown(gracePeriod: gracePeriod)
        calls.finish()
    }

    /// Closes every connection at once and ends `serve()`, cancelling the calls still running.
    public func close() {
        server.close()
        calls.finish()
    }

    private static let transportHeaders: Set<String> = ["content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "user-agent"]

    private static func handle(
        _ request: HTTP2ServerRequest, _ responder: HTTP2Responder, router: GRPCRouter, maxSize: Int, calls: CallQueue<Call>
    ) {
        let contentType = request.headers.first("content-type") ?? ""
        guard isGRPCContentType(contentType) else {
            if let fallback = router.fallback {
                let call: Call = { responder.respond(await fallback(request)) }
                if !calls.enqueue(call) {
                    responder.respond(status: 503, headers: [HTTP2Header("content-type", "text/plain")], body: Array((stopping.message + "\n").utf8))
                }
            } else {
                responder.respond(status: 415, headers: [HTTP2Header("content-type", "text/plain")], body: Array("expected content-type application/grpc\n".utf8))
            }
            return
        }
        guard request.method == "POST" else {
            responder.respond(status: 405, headers: [HTTP2Header("allow", "POST")])
            return
        }
        if let encoding = request.headers.first("grpc-encoding"), encoding != "identity" {
            respondTrailersOnly(responder, GRPCStatus(.unimplemented, "grpc-encoding \(encoding) is not supported"),
                                extra: [HTTP2Header("grpc-accept-encoding", "identity")])
            return
        }
        guard let route = router.routes[request.path] else {
            respondTrailersOnly(responder, GRPCStatus(.unimplemented, "Method not found: \(request.path)"))
            return
        }
        var timeout: Duration?
        if let value = request.headers.first("grpc-timeout") {
            guard let parsed = GRPCWire.parseTimeout(value) else {
                respondTrailersOnly(responder, GRPCStatus(.internal, "malformed grpc-timeout \(value)"))
                return
            }
            timeout = parsed
        }
        let context = GRPCContext(
            path: request.path,
            metadata: request.headers.filter { !transportHeaders.contains($0.name) },
            deadline: timeout.map { ContinuousClock.now + $0 },
            connection: request.connection)
        let handler: UnaryHandlerBox
        switch route {
        case .unary(let unary):
            handler = UnaryHandlerBox(unary)
        case .streaming(let streaming, let singleRequest):
            let messages: [[UInt8]]
            do throws(GRPCStatus) {
                messages = try GRPCWire.unframeAll(request.body, maxSize: maxSize)
                if singleRequest && messages.count != 1 {
                    throw GRPCStatus(.internal, messages.isEmpty ? "request has no message" : "more than one message in a server-streaming request")
                }
            } catch {
                respondTrailersOnly(responder, error)
                return
            }
            serveStreaming(streaming, messages, context, responder, timeout: timeout, calls: calls)
            return
        }
        let message: [UInt8]
        do {
            message = try GRPCWire.unframeSingle(request.body, maxSize: maxSize)
        } catch {
            respondTrailersOnly(responder, error)
            return
        }
        let call = CallCompletion(responder: responder)
        let work: Call = {
            do {
                let reply = try await handler.handler(message, context)
                call.complete(.success(reply))
            } catch let status as GRPCStatus {
                call.complete(.failure(status))
            } catch is CancellationError {
                call.complete(.failure(GRPCStatus(.cancelled, "the call was cancelled")))
            } catch {
                call.complete(.failure(GRPCStatus(.unknown, String(describing: error), cause: error)))
            }
        }
        let accepted = calls.enqueue { [timeout] in
            await run(work, timeout: timeout, closed: nil) { call.complete(.failure($0)) }
        }
        if !accepted { call.complete(.failure(stopping)) }
    }

    private static func serveStreaming(
        _ handler: @escaping GRPCRouter.StreamingHandler, _ messages: [[UInt8]], _ context: GRPCContext,
        _ responder: HTTP2Responder, timeout: Duration?, calls: CallQueue<Call>
    ) {
        let writer = GRPCResponseWriter(responder: responder)
        let work: Call = {
            do {
                try await handler(messages, context, writer)
                writer.finish()
            } catch let status as GRPCStatus {
                writer.finish(status)
            } catch is CancellationError {
                writer.finish(GRPCStatus(.cancelled, "the call was cancelled"))
            } catch {
                writer.finish(GRPCStatus(.unknown, String(describing: error), cause: error))
            }
        }
        // The client went away (reset, connection closed) or the call ended: stop the producer.
        let closed = OneShot()
        responder.onClose { closed.fire() }
        let accepted = calls.enqueue {
            await run(work, timeout: timeout, closed: closed) { writer.finish($0) }
        }
        if !accepted { writer.finish(stopping) }
    }

    /// The status of a call that arrived after the server ended `serve()`.
    private static let stopping = GRPCStatus(.unavailable, "the server is stopping")

    /// Runs `work` beside the call's deadline (`timeout`; `expire` answers it with DEADLINE_EXCEEDED)
    /// and the client going away (`closed`): whichever ends first ends the call, and the others are
    /// cancelled.
    private static func run(_ work: @escaping Call, timeout: Duration?, closed: OneShot?, expire: @escaping @Sendable (GRPCStatus) -> Void) async {
        guard timeout != nil || closed != nil else {
            await work()
            return
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await work() }
            if let timeout {
                group.addTask {
                    guard (try? await Task.sleep(for: timeout)) != nil else { return }
                    expire(GRPCStatus(.deadlineExceeded, "deadline of \(timeout) exceeded"))
                }
            }
            if let closed {
                group.addTask { await closed.wait() }
            }
            await group.next()
            group.cancelAll()
        }
    }

    static func isGRPCContentType(_ value: String) -> Bool {
        guard value.hasPrefix("application/grpc") else { return false }
        let rest = value.dropFirst("application/grpc".count)
        return rest.isEmpty || rest.hasPrefix("+") || rest.hasPrefix(";")
    }

    static func respondTrailersOnly(_ responder: HTTP2Responder, _ status: GRPCStatus, extra: [HTTP2Header] = []) {
        responder.respond(trailersOnly(status, extra: extra))
    }

    /// An error-only gRPC response: one HEADERS frame with END_STREAM carrying the status.
    static func trailersOnly(_ status: GRPCStatus, extra: [HTTP2Header] = []) -> HTTP2ServerResponse {
        var headers = [HTTP2Header("content-type", "application/grpc"), HTTP2Header("grpc-status", String(status.code.rawValue))]
        if !status.message.isEmpty { headers.append(HTTP2Header("grpc-message", GRPCWire.percentEncode(status.message))) }
        return HTTP2ServerResponse(status: 200, headers: headers + status.metadata + extra)
    }

    /// The gRPC status of a call the HTTP/2 server answered at a limit (docs/http2-server-limits.md):
    /// RESOURCE_EXHAUSTED for sizes (as for an oversized message), DEADLINE_EXCEEDED for a stalled body.
    static func limitStatusCode(_ limit: HTTP2ServerLimit) -> GRPCStatus.Code {
        limit == .requestBodyTimeout ? .deadlineExceeded : .resourceExhausted
    }
}

/// A unary handler, boxed so that the switch over routes can bind it.
private struct UnaryHandlerBox: Sendable {
    let handler: GRPCRouter.UnaryHandler
    init(_ handler: @escaping GRPCRouter.UnaryHandler) { self.handler = handler }
}

/// Sends a call's outcome exactly once: the handler's result or the deadline, whichever comes first.
private final class CallCompletion: Sendable {
    private let responder: HTTP2Responder
    private let done = Atomic<Bool>(false)

    init(responder: HTTP2Responder) { self.responder = responder }

    /// Returns false when the call had already completed.
    @discardableResult
    func complete(_ result: Result<[UInt8], GRPCStatus>) -> Bool {
        guard !done.exchange(true, ordering: .acquiringAndReleasing) else { return false }
        switch result {
        case .success(let reply):
            responder.respond(
                status: 200, headers: [HTTP2Header("content-type", "application/grpc")], body: GRPCWire.frame(reply),
                trailers: [HTTP2Header("grpc-status", "0")])
        case .failure(let status):
            GRPCServer.respondTrailersOnly(responder, status)
        }
        return true
    }
}
