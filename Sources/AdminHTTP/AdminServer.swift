internal import CMicroHTTPD
import ServiceCore
import Synchronization

/// The HTTP/1.1 admin port every executable serves (`PUSH_ADMIN_PORT`), for Prometheus and for the
/// probes of container orchestrators, which speak HTTP/1.1 while the project's own server speaks only
/// HTTP/2:
///
/// - `GET /metrics`: `AdminEndpoints.metrics` (Prometheus text format 0.0.4,
///   `content-type: text/plain; version=0.0.4; charset=utf-8`).
/// - `GET /healthz`: `AdminEndpoints.liveness`, 200 when passing, else 503; body `ProbeReport.text`.
/// - `GET /readyz`: `AdminEndpoints.readiness`, the same way.
/// - `POST /debug/<name>?…`: the test hook `<name>` when `AdminEndpoints.testHooks` has it (only when
///   the executable enabled them), else 404.
/// - `GET <prefix>…` of each `AdminEndpoints.asyncRoutes` entry (the dispatcher's
///   `/v1/requests/<id>`): the connection is suspended (`MHD_suspend_connection`, the daemon runs with
///   `MHD_ALLOW_SUSPEND_RESUME`) and the call handed to `serve()`, which runs the handler as a child
///   task of its task group; its answer is stored and the connection resumed; libmicrohttpd then calls
///   the access handler again on its own thread, which queues the stored answer. No answer within
///   `AdminEndpoints.asyncTimeout`: 503 (and the handler is cancelled). `stop()` answers every
///   suspended request with 503 and resumes it before stopping the daemon, as libmicrohttpd requires.
///   These routes are answered only while `serve()` runs (`AdminService.run` runs it).
///
/// Built on libmicrohttpd (Debian's libmicrohttpd12) with its own polling thread
/// (`MHD_USE_INTERNAL_POLLING_THREAD`), a connection limit (`MHD_OPTION_CONNECTION_LIMIT`) and an idle
/// connection timeout (`MHD_OPTION_CONNECTION_TIMEOUT`). Requests are answered on that thread: the
/// endpoints must read state synchronously and quickly (locks, atomics), never wait on Swift tasks
/// and never do I/O. `HEAD` is answered like `GET` without a body.
public final class AdminServer: Sendable {
    /// Where and how the admin port listens.
    public struct Configuration: Sendable {
        /// IPv4 address to bind. Default `0.0.0.0` (probes come from outside the container).
        public var host: String = "0.0.0.0"
        /// TCP port; 0 lets the kernel pick one (read it from `AdminServer.port`).
        public var port: Int
        /// Most connections open at once; later ones are refused. Default 64.
        public var connectionLimit: Int = 64
        /// An idle connection is closed after this long. Default 10 s.
        public var connectionTimeout: Duration = .seconds(10)

        /// - Parameter port: see the property.
        public init(port: Int) { self.port = port }
    }

    /// The port the server listens on.
    public let port: Int
    private let daemon: DaemonHandle
    private let context: Unmanaged<RequestContext>

    private init(port: Int, daemon: DaemonHandle, context: Unmanaged<RequestContext>) {
        self.port = port
        self.daemon = daemon
        self.context = context
    }

    deinit {
        stop()
        // The daemon's thread has ended (MHD_stop_daemon joins it): no callback can reach the context.
        context.release()
    }

    /// Starts listening.
    /// - Throws: `AdminServerError` when the port is out of range, the address is not IPv4 dotted
    ///   form, or libmicrohttpd cannot bind (address in use).
    public static func start(configuration: Configuration, endpoints: AdminEndpoints) throws(AdminServerError) -> AdminServer {
        guard (0...65535).contains(configuration.port) else {
            throw AdminServerError("admin port \(configuration.port) is outside 0…65535")
        }
        let context = Unmanaged.passRetained(RequestContext(endpoints: endpoints))
        let timeout = UInt32(clamping: max(1, configuration.connectionTimeout.wholeMilliseconds / 1000))
        guard let daemon = push_mhd_start(
            configuration.host, UInt16(configuration.port), UInt32(clamping: max(1, configuration.connectionLimit)), timeout,
            adminAccessHandler, context.toOpaque())
        else {
            context.release()
            throw AdminServerError("cannot listen on \(configuration.host):\(configuration.port) (address in use or not an IPv4 address)")
        }
        let port = Int(push_mhd_bound_port(daemon))
        return AdminServer(port: port == 0 ? configuration.port : port, daemon: DaemonHandle(daemon), context: context)
    }

    /// Runs the handlers of async routes until `stop()` (or until the calling task is cancelled).
    ///
    /// Each suspended request is one child task of this call's task group, itself a group of two
    /// children: the handler and its deadline (`AdminEndpoints.asyncTimeout`); whichever ends first
    /// answers, and the other is cancelled. Requests wait for `serve()` in an unbounded buffer, held to
    /// the connection limit by libmicrohttpd (one per suspended connection). Once `stop()` answered
    /// every suspended request with 503, the handlers still running are cancelled and awaited.
    /// Call it once per server (the requests' stream has one reader).
    public func serve() async {
        await context.takeUnretainedValue().serve()
    }

    /// Stops listening and closes connections (`MHD_stop_daemon`, which waits for its thread).
    /// Suspended requests of async routes are answered 503 and resumed first, and `serve()` returns
    /// once their handlers ended. Idempotent.
    public func stop() {
        context.takeUnretainedValue().resumeAll(with: AdminServer.unavailable("the server is stopping"))
        daemon.stop()
    }

    /// A 503 answer with a JSON error body, `{"error":"unavailable","message":…}` (`message` is one of
    /// this file's fixed texts, so it needs no escaping).
    static func unavailable(_ message: String) -> AdminResponse {
        AdminResponse(status: 503, contentType: AdminResponse.json, body: "{\"error\":\"unavailable\",\"message\":\"\(message)\"}\n")
    }
}

/// The `MHD_Daemon` pointer, stopped once. `@unchecked Sendable`: the pointer is only passed to
/// `MHD_stop_daemon`, once, under the lock; libmicrohttpd's internal thread owns the daemon otherwise.
private final class DaemonHandle: @unchecked Sendable {
    private let daemon: OpaquePointer
    private let stopped = Atomic<Bool>(false)

    init(_ daemon: OpaquePointer) { self.daemon = daemon }

    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        MHD_stop_daemon(daemon)
    }
}

/// What the access handler reaches through its unretained context pointer; retained by the server
/// (`AdminServer.context`) until the daemon stopped.
private final class RequestContext: Sendable {
    let endpoints: AdminEndpoints
    /// Suspended connections waiting for their answer; `stopped` once `resumeAll` ran.
    private let waiting = Mutex<(stopped: Bool, answers: [ObjectIdentifier: DeferredAnswer])>((false, [:]))
    /// Deferred calls from libmicrohttpd's thread to `serve()`; finished by `resumeAll`.
    private let calls = CallQueue<DeferredCall>()

    init(endpoints: AdminEndpoints) { self.endpoints = endpoints }

    /// Hands a suspended request's handler to `serve()` (on libmicrohttpd's thread). After `resumeAll`
    /// the call is dropped: its request was answered 503.
    func enqueue(_ call: DeferredCall) {
        calls.enqueue(call)
    }

    /// See `AdminServer.serve()`.
    func serve() async {
        let timeout = endpoints.asyncTimeout
        // Once stopped, every request was answered 503: a handler still running is cancelled, its
        // late answer dropped.
        await calls.serve { call in await self.answer(call, timeout: timeout) }
    }

    /// Runs `call`'s handler beside its deadline; the first to end answers and the other is cancelled.
    private func answer(_ call: DeferredCall, timeout: Duration) async {
        await withTaskGroup(of: AdminResponse?.self) { group in
            group.addTask { await call.work() }
            group.addTask {
                guard (try? await Task.sleep(for: timeout)) != nil else { return nil }
                return AdminServer.unavailable("no answer within \(timeout.wholeMilliseconds) ms")
            }
            while let next = await group.next() {
                guard let response = next else { continue }  // the deadline, cancelled
                complete(call.answer, with: response)
                break
            }
            group.cancelAll()
        }
    }

    /// Registers a request about to be suspended.
    /// - Returns: false when the server is stopping (answer at once instead).
    func begin(_ answer: DeferredAnswer) -> Bool {
        waiting.withLock { state in
            guard !state.stopped else { return false }
            state.answers[ObjectIdentifier(answer)] = answer
            return true
        }
    }

    /// Stores `response` as the answer and resumes the connection, unless it was answered already
    /// (the timeout, or `resumeAll`): only the first answer counts, and a connection is resumed once.
    func complete(_ answer: DeferredAnswer, with response: AdminResponse) {
        waiting.withLock { state in
            guard state.answers.removeValue(forKey: ObjectIdentifier(answer)) != nil else { return }
            answer.resume(with: response)
        }
    }

    /// Answers every waiting request with `response` and refuses new ones (before `MHD_stop_daemon`).
    func resumeAll(with response: AdminResponse) {
        waiting.withLock { state in
            state.stopped = true
            for answer in state.answers.values { answer.resume(with: response) }
            state.answers.removeAll()
        }
        calls.finish()
    }
}

/// A suspended request and the handler that answers it.
private struct DeferredCall: Sendable {
    let answer: DeferredAnswer
    let work: @Sendable () async -> AdminResponse
}

/// The answer of one suspended request. `@unchecked Sendable`: `connection` is only passed to
/// `MHD_resume_connection`, which libmicrohttpd allows from any thread for a suspended connection,
/// once (under `RequestContext`'s lock, which also guarantees the connection is still suspended);
/// `response` is behind a lock.
private final class DeferredAnswer: @unchecked Sendable {
    private let connection: OpaquePointer
    private let response = Mutex<AdminResponse?>(nil)

    init(connection: OpaquePointer) { self.connection = connection }

    /// The stored answer (read on libmicrohttpd's thread after the resume).
    var answer: AdminResponse? { response.withLock { $0 } }

    func resume(with answer: AdminResponse) {
        response.withLock { $0 = answer }
        MHD_resume_connection(connection)
    }
}

/// `MHD_NO`: libmicrohttpd's closed C enums import as Swift enums whose case names vary with the
/// importer; their raw values are fixed by the header.
private let mhdNo = MHD_Result(rawValue: 0)!

/// `MHD_AccessHandlerCallback`, on libmicrohttpd's polling thread: answers the request on its first
/// call (a request body, if any, is discarded).
private func adminAccessHandler(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?, _ method: UnsafePointer<CChar>?,
    _ version: UnsafePointer<CChar>?, _ uploadData: UnsafePointer<CChar>?, _ uploadDataSize: UnsafeMutablePointer<Int>?,
    _ connectionContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let url, let method else { return mhdNo }
    let context = Unmanaged<RequestContext>.fromOpaque(cls).takeUnretainedValue()
    let methodName = String(cString: method)
    // Called again after a deferred answer resumed the connection: queue the stored answer.
    if let connectionContext, let stored = connectionContext.pointee {
        connectionContext.pointee = nil
        let answer = Unmanaged<DeferredAnswer>.fromOpaque(stored).takeRetainedValue()
        return queueResponse(answer.answer ?? AdminServer.unavailable("no answer"), method: methodName, connection: connection)
    }
    let path = String(cString: url)
    let route = context.endpoints.route(method: methodName, path: path) { name in
        MHD_lookup_connection_value(connection, MHD_ValueKind(rawValue: 8)!  /* MHD_GET_ARGUMENT_KIND */, name).map { String(cString: $0) }
    }
    switch route {
    case .immediate(let response):
        return queueResponse(response, method: methodName, connection: connection)
    case .deferred(let work):
        guard let connectionContext else { return mhdNo }
        let answer = DeferredAnswer(connection: connection)
        guard context.begin(answer) else {
            return queueResponse(AdminServer.unavailable("the server is stopping"), method: methodName, connection: connection)
        }
        // Retained until the second call takes it back; resumed only after the suspension below (the
        // resume is processed by this very thread once the handler returned).
        connectionContext.pointee = Unmanaged.passRetained(answer).toOpaque()
        MHD_suspend_connection(connection)
        context.enqueue(DeferredCall(answer: answer, work: work))
        return MHD_Result(rawValue: 1)!  // MHD_YES
    }
}

/// Queues `response` on `connection` (on libmicrohttpd's thread); `HEAD` gets no body.
private func queueResponse(_ response: AdminResponse, method methodName: String, connection: OpaquePointer) -> MHD_Result {
    var body = methodName == "HEAD" ? [] : Array(response.body.utf8)
    let mhdResponse = body.withUnsafeMutableBytes { bytes in
        MHD_create_response_from_buffer(bytes.count, bytes.baseAddress, MHD_ResponseMemoryMode(rawValue: 2)!  /* MHD_RESPMEM_MUST_COPY */)
    }
    guard let mhdResponse else { return mhdNo }
    defer { MHD_destroy_response(mhdResponse) }
    MHD_add_response_header(mhdResponse, "Content-Type", response.contentType)
    MHD_add_response_header(mhdResponse, "Cache-Control", "no-store")
    return MHD_queue_response(connection, UInt32(response.status), mhdResponse)
}
