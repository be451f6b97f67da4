import Foundation
import ServiceCore
import Synchronization
internal import CNghttp2

/// One request stream on the server side. Loop-confined (see `SessionCore`); it crosses threads only
/// inside an `HTTP2Responder`, which touches it only through `loop.execute`.
final class ServerStream: OutboundStream, @unchecked Sendable {
    let id: Int32
    var method = ""
    var path = ""
    var authority: String?
    var scheme: String?
    var headers: [HTTP2Header] = []
    var trailers: [HTTP2Header] = []
    var body: [UInt8] = []
    var closed = false
    var responded = false
    /// The handler has the request, or the server answered it itself (a limit): later body bytes are dropped.
    var dispatched = false
    /// Decoded size of the header block being received (request headers, then trailers).
    var headerBudget: HeaderListBudget
    /// The header list passed the limit: fields are no longer stored.
    var headerListExceeded = false
    /// Body bytes stored but not yet returned to the connection's flow-control window (they are
    /// returned when the handler takes the body, or when it is dropped).
    var unconsumed = 0
    /// Progress of a body still arriving; nil when the request has no body or it is complete.
    var progress: RequestBodyProgress?
    /// Reset the stream with NO_ERROR once the response ended, if the request has not (RFC 9113 §8.1).
    var resetAfterResponse = false
    /// Answered at a size limit while the body still arrives: the rest is read and dropped until
    /// `progress`'s deadline (clients such as curl report a reset upload as an error even after a
    /// complete answer), then the stream is reset.
    var lingering = false
    /// The last frame of the response (END_STREAM) was sent.
    var responseEnded = false
    /// Called once when the stream closes (client reset, end, or connection closed); loop thread.
    var onClose: (@Sendable () -> Void)?

    func markClosed() {
        closed = true
        let callback = onClose
        onClose = nil
        callback?()
    }

    init(id: Int32, headerListLimit: Int) {
        self.id = id
        headerBudget = HeaderListBudget(limit: headerListLimit)
        super.init()
        headers.reserveCapacity(8)
    }
}

/// State shared by every connection of one server: configuration, handler, limits and the registries
/// of connections (every accepted one, for the connection limit; handshaken ones, for `connections()`).
final class ServerShared: Sendable {
    let settings: HTTP2Settings
    let limits: HTTP2ServerLimits
    let timeouts: ConnectionTimeouts
    let handler: HTTP2Server.Handler
    let limitResponse: @Sendable (HTTP2ServerLimitBreach, HTTP2ServerRequest) -> HTTP2ServerResponse
    let tls: TLSContext?
    let logger: Logger
    let connections = Mutex<[UInt64: HTTP2ServerConnection]>([:])
    let nextConnectionID = Atomic<UInt64>(1)
    let accounting: ServerAccounting
    private let table = Mutex(ConnectionTable())

    /// Every accepted connection, and how many of them are not already closing.
    private struct ConnectionTable {
        var cores: [UInt64: ServerCore] = [:]
        var admitted = 0
    }

    /// The outcome of `admit(_:)`.
    enum Admission {
        case admitted
        /// Admitted in place of `victim`, which the caller must close.
        case evicting(ServerCore)
        case refused
    }

    init(configuration: HTTP2Server.Configuration, handler: @escaping HTTP2Server.Handler, tls: TLSContext?) {
        var settings = configuration.settings
        settings.maxHeaderListSize = min(settings.maxHeaderListSize ?? UInt32.max, UInt32(clamping: configuration.limits.maxHeaderListBytes))
        settings.connectionWindowSize = UInt32(configuration.limits.connectionWindow(for: configuration.settings))
        self.settings = settings
        self.limits = configuration.limits
        self.timeouts = ConnectionTimeouts(configuration.limits)
        self.handler = handler
        self.limitResponse = configuration.limitResponse
        self.tls = tls
        self.logger = configuration.logger
        self.accounting = ServerAccounting(logger: configuration.logger, metrics: configuration.metrics)
    }

    /// Registers a new connection under `maxConnections`, choosing the longest-idle one to close when
    /// the server is full (`ConnectionEviction`).
    func admit(_ core: ServerCore) -> Admission {
        let admission: Admission = table.withLock { table in
            if table.admitted < limits.maxConnections {
                table.cores[core.id] = core
                table.admitted += 1
                return .admitted
            }
            let candidates = table.cores.values.lazy.map {
                ConnectionEviction.Candidate(id: $0.id, idleSince: $0.idleSinceForEviction, closing: $0.closingInTable)
            }
            guard let id = ConnectionEviction.victim(among: candidates), let victim = table.cores[id] else { return .refused }
            victim.closingInTable = true
            table.cores[core.id] = core
            return .evicting(victim)
        }
        if case .refused = admission { return admission }
        accounting.connectionOpened()
        return admission
    }

    /// The connection started closing by itself: its place is free for a new one.
    func markClosing(_ core: ServerCore) {
        table.withLock { table in
            guard table.cores[core.id] != nil, !core.closingInTable else { return }
            core.closingInTable = true
            table.admitted -= 1
        }
    }

    /// The connection closed.
    func remove(_ core: ServerCore) {
        let removed = table.withLock { table -> Bool in
            guard table.cores.removeValue(forKey: core.id) != nil else { return false }
            if !core.closingInTable { table.admitted -= 1 }
            core.closingInTable = true
            return true
        }
        if removed { accounting.connectionClosed() }
        connections.withLock { _ = $0.removeValue(forKey: core.id) }
    }

    /// Connections held, handshaking and closing included.
    var connectionCount: Int { table.withLock { $0.cores.count } }
}

/// The server half of one connection.
///
/// Limits (docs/http2-server-limits.md): header lists are counted in the header callback; body bytes
/// are returned to the connection window only when the handler takes the body (automatic window
/// updates are off); one timer per connection watches the handshake, idleness and stalled bodies
/// (`ConnectionDeadlines`), armed for the earliest deadline and re-armed when it fires.
final class ServerCore: SessionCore, @unchecked Sendable {
    let id: UInt64
    let shared: ServerShared
    let remoteAddress: String
    private var streams: [Int32: ServerStream] = [:]
    private(set) var handle: HTTP2ServerConnection?
    /// Since when the connection has had no open stream (accept time until its first stream), or 0
    /// while it has streams. Written on the loop thread, read by the accepting thread to pick a
    /// connection to evict.
    private let idleSince: Atomic<UInt64>
    /// Guarded by `ServerShared`'s table lock: the connection no longer counts toward the limit.
    var closingInTable = false
    /// Accept time while the TLS handshake runs; nil once it completed.
    private var handshakeStart: UInt64?
    private var timer: TimerToken?
    private var timerDeadline = UInt64.max
    /// Close once the last stream ends (an eviction that raced with a new request).
    private var closeWhenIdle = false

    init(id: UInt64, loop: EventLoop, transport: Transport, shared: ServerShared, remoteAddress: String) {
        self.id = id
        self.shared = shared
        self.remoteAddress = remoteAddress
        let now = monotonicNanos()
        idleSince = Atomic(now)
        handshakeStart = now
        super.init(loop: loop, transport: transport, phase: .handshaking)
    }

    /// For `ConnectionEviction`, from any thread.
    var idleSinceForEviction: UInt64? {
        let value = idleSince.load(ordering: .relaxed)
        return value == 0 ? nil : value
    }

    /// Runs on the loop thread: registers the socket and starts the TLS handshake (if any).
    func start() {
        guard register(writable: false) else {
            closeConnection(HTTP2Error(.internalError, "epoll_ctl failed"), graceful: false)
            return
        }
        if let handshakeStart { arm(at: handshakeStart &+ shared.timeouts.handshake) }
        beginHandshake()
    }

    override func handshakeDidComplete() -> HTTP2Error? {
        handshakeStart = nil
        let handle = HTTP2ServerConnection(
            core: self, id: id, remoteAddress: remoteAddress,
            peerCertificate: transport.peerCertificate(), alpnProtocol: transport.alpnProtocol)
        self.handle = handle
        shared.connections.withLock { $0[id] = handle }
        if let since = idleSinceForEviction { arm(at: since &+ shared.timeouts.idle) }
        return nil
    }

    override func makeSession() -> OpaquePointer? {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return nil }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, serverOnBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, serverOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, serverOnDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, serverOnFrameRecv)
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, serverOnFrameSend)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, serverOnStreamClose)
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        defer { nghttp2_option_del(option) }
        // Window updates follow what the handler took, not what arrived (docs/http2-server-limits.md).
        nghttp2_option_set_no_auto_window_update(option, 1)
        var session: OpaquePointer?
        let rc = nghttp2_session_server_new2(&session, callbacks, Unmanaged.passUnretained(self).toOpaque(), option)
        return rc == 0 ? session : nil
    }

    override func sessionDidStart() {
        submitInitialSettings(shared.settings, isServer: true)
    }

    override func connectionDidClose(_ error: HTTP2Error?) {
        for stream in streams.values { stream.markClosed() }
        streams.removeAll()
        // The handle holds this core: without this, every connection (its TLS state included) leaked.
        handle = nil
        timer?.cancel()
        timer = nil
        shared.remove(self)
        // Keep this object alive until the end of the loop iteration: we may be inside a callback.
        loop.defer_ { [self] in _ = self.id }
    }

    // MARK: Timer

    /// Makes sure the timer fires no later than `deadline`.
    private func arm(at deadline: UInt64) {
        guard deadline < timerDeadline, phase != .closed else { return }
        timer?.cancel()
        timerDeadline = deadline
        let now = monotonicNanos()
        timer = loop.schedule(after: .nanoseconds(deadline > now ? deadline - now : 0)) { [weak self] in self?.timerFired() }
    }

    private func timerFired() {
        timer = nil
        timerDeadline = .max
        guard phase != .closed else { return }
        let decision = ConnectionDeadlines.decide(
            now: monotonicNanos(), timeouts: shared.timeouts, handshakeStart: handshakeStart, idleSince: handshakeStart == nil ? idleSinceForEviction : nil,
            bodies: streams.values.lazy.compactMap { stream in stream.progress.map { (streamID: stream.id, progress: $0) } })
        switch decision.close {
        case .handshakeTimeout?:
            shared.accounting.breach(.handshakeTimeout, "TLS handshake not complete after \(Duration.nanoseconds(shared.timeouts.handshake))", remote: remoteAddress)
            shared.markClosing(self)
            closeConnection(HTTP2Error(.timeout, "TLS handshake timed out"), graceful: false)
            return
        case .some(let limit):
            shared.accounting.breach(limit, "no stream for \(Duration.nanoseconds(shared.timeouts.idle))", remote: remoteAddress)
            terminate()
            return
        case nil:
            break
        }
        for streamID in decision.stalledStreams {
            guard let stream = streams[streamID] else { continue }
            if stream.lingering {
                // Long enough to read a refused body: ask the client to stop (RFC 9113 §8.1).
                stream.lingering = false
                stream.progress = nil
                stream.resetAfterResponse = true
                if stream.responseEnded { responseDidEnd(stream) }
                continue
            }
            let timeout = Duration.nanoseconds(shared.timeouts.requestBody)
            breach(stream, HTTP2ServerLimitBreach(
                limit: .requestBodyTimeout,
                message: "the request body gained less than \(shared.timeouts.minimumProgressBytes) bytes in \(timeout)"))
        }
        if let next = decision.next { arm(at: next) }
        scheduleFlush()
    }

    // MARK: Callback entry points

    fileprivate func beginStream(_ streamID: Int32, hasBody: Bool) {
        let stream = ServerStream(id: streamID, headerListLimit: shared.limits.maxHeaderListBytes)
        if streams.isEmpty { idleSince.store(0, ordering: .relaxed) }
        streams[streamID] = stream
        nghttp2_session_set_stream_user_data(session, streamID, Unmanaged.passUnretained(stream).toOpaque())
        if hasBody {
            let now = monotonicNanos()
            stream.progress = RequestBodyProgress(start: now)
            arm(at: now &+ shared.timeouts.requestBody)
        }
    }

    fileprivate func endStream(_ streamID: Int32) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        stream.markClosed()
        releaseBody(stream)
        if streams.isEmpty && phase == .open {
            let now = monotonicNanos()
            idleSince.store(now, ordering: .relaxed)
            if closeWhenIdle {
                loop.defer_ { [self] in terminate() }
            } else {
                arm(at: now &+ shared.timeouts.idle)
            }
        }
    }

    /// Returns the stored body bytes of `stream` to the connection window.
    private func releaseBody(_ stream: ServerStream) {
        guard stream.unconsumed > 0, let session else { return }
        nghttp2_session_consume_connection(session, stream.unconsumed)
        stream.unconsumed = 0
    }

    fileprivate func receiveBody(_ stream: ServerStream, _ data: UnsafePointer<UInt8>, _ length: Int) {
        guard let session else { return }
        guard stream.body.count + length <= shared.limits.maxRequestBodyBytes else {
            breach(stream, HTTP2ServerLimitBreach(
                limit: .requestBodySize, message: "the request body passed \(shared.limits.maxRequestBodyBytes) bytes"))
            nghttp2_session_consume(session, stream.id, length)
            return
        }
        stream.body.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
        stream.unconsumed += length
        nghttp2_session_consume_stream(session, stream.id, length)
        if stream.progress != nil {
            stream.progress!.received(length, now: monotonicNanos(), minimumBytes: shared.timeouts.minimumProgressBytes)
        }
    }

    /// The header block of `stream` ended (END_HEADERS): answer it if its list passed the limit.
    fileprivate func headersDidEnd(_ stream: ServerStream) {
        guard stream.headerListExceeded, !stream.dispatched else { return }
        breach(stream, HTTP2ServerLimitBreach(
            limit: .headerListSize, message: "the header list passed \(shared.limits.maxHeaderListBytes) bytes (name + value + 32 per field)"))
    }

    fileprivate func dispatch(_ stream: ServerStream) {
        stream.progress = nil
        guard !stream.dispatched, let handle else { return }
        stream.dispatched = true
        releaseBody(stream)
        var headers: [HTTP2Header] = []
        var trailers: [HTTP2Header] = []
        var body: [UInt8] = []
        swap(&headers, &stream.headers)
        swap(&trailers, &stream.trailers)
        swap(&body, &stream.body)
        let request = HTTP2ServerRequest(
            method: stream.method, path: stream.path, authority: stream.authority, scheme: stream.scheme,
            headers: headers, body: body, trailers: trailers, streamID: stream.id, connection: handle)
        shared.handler(request, HTTP2Responder(core: self, stream: stream))
    }

    /// Answers a request that passed a limit itself (the handler never sees it), drops what it stored,
    /// and resets the stream with NO_ERROR once the answer is out if the request has not ended.
    private func breach(_ stream: ServerStream, _ breach: HTTP2ServerLimitBreach) {
        guard !stream.dispatched, let handle else { return }
        stream.dispatched = true
        stream.progress = nil
        stream.body = []
        releaseBody(stream)
        shared.accounting.breach(breach.limit, breach.message, remote: remoteAddress)
        let request = HTTP2ServerRequest(
            method: stream.method, path: stream.path, authority: stream.authority, scheme: stream.scheme,
            headers: stream.headers, body: [], trailers: [], streamID: stream.id, connection: handle)
        stream.headers = []
        stream.trailers = []
        if let session, nghttp2_session_get_stream_remote_close(session, stream.id) == 0 {
            if breach.limit == .requestBodyTimeout {
                stream.resetAfterResponse = true
            } else {
                let now = monotonicNanos()
                stream.lingering = true
                stream.progress = RequestBodyProgress(start: now)  // never advanced: a deadline
                arm(at: now &+ shared.timeouts.requestBody)
            }
        }
        respond(stream, shared.limitResponse(breach, request))
    }

    /// Closes the connection at the server's initiative: GOAWAY NO_ERROR at once when it has no
    /// streams, else once they finished; a peer that does not read gets its socket closed after 2 s.
    func terminate() {
        shared.markClosing(self)
        lingersOnGracefulClose = false
        switch phase {
        case .connecting, .handshaking:
            closeConnection(HTTP2Error(.connectionClosed, "closed by the server before the handshake completed"), graceful: false)
        case .open:
            guard let session else { return }
            if streams.isEmpty {
                nghttp2_session_terminate_session(session, HTTP2ErrorCode.noError.rawValue)
                scheduleFlush()
                loop.schedule(after: .seconds(2)) { [weak self] in self?.drop() }
            } else if !closeWhenIdle {
                closeWhenIdle = true
                goAway(lastStreamID: nil, errorCode: .noError, debugData: [])
            }
        case .closed:
            break
        }
    }

    // MARK: Operations (loop thread)

    func respond(_ stream: ServerStream, _ response: HTTP2ServerResponse) {
        guard phase == .open, let session, !stream.closed, !stream.responded else { return }
        stream.responded = true
        let hasData = !response.body.isEmpty || (response.trailers.map { !$0.isEmpty } ?? false)
        stream.outBody = response.body
        stream.outTrailers = response.trailers
        let rc: Int32 = withHeaderBlock(pseudo: [(":status", statusText(response.status))], headers: response.headers) { nva, count in
            if hasData {
                var provider = nghttp2_data_provider()
                provider.read_callback = dataSourceRead
                return nghttp2_submit_response(session, stream.id, nva, count, &provider)
            }
            return nghttp2_submit_response(session, stream.id, nva, count, nil)
        }
        if rc != 0 {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.id, HTTP2ErrorCode.internalError.rawValue)
        }
        scheduleFlush()
    }

    /// The response of `streamID` ended; RFC 9113 §8.1 lets a server that answered early ask the
    /// client to stop sending with RST_STREAM NO_ERROR.
    fileprivate func responseDidEnd(_ stream: ServerStream) {
        stream.responseEnded = true
        guard stream.resetAfterResponse, let session, nghttp2_session_get_stream_remote_close(session, stream.id) == 0 else { return }
        stream.resetAfterResponse = false
        nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.id, HTTP2ErrorCode.noError.rawValue)
        scheduleFlush()
    }

    /// Starts a streaming response: HEADERS now, DATA as `sendData` supplies it, the end (trailers)
    /// with `finishStreaming`.
    func startStreaming(_ stream: ServerStream, status: Int, headers: [HTTP2Header]) {
        guard phase == .open, let session, !stream.closed, !stream.responded else { return }
        stream.responded = true
        stream.outOpen = true
        let rc: Int32 = withHeaderBlock(pseudo: [(":status", statusText(status))], headers: headers) { nva, count in
            var provider = nghttp2_data_provider()
            provider.read_callback = dataSourceRead
            return nghttp2_submit_response(session, stream.id, nva, count, &provider)
        }
        if rc != 0 {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.id, HTTP2ErrorCode.internalError.rawValue)
        }
        scheduleFlush()
    }

    /// Appends `bytes` to a streaming response's body.
    func sendData(_ stream: ServerStream, _ bytes: [UInt8]) {
        guard phase == .open, let session, !stream.closed, stream.outOpen else { return }
        stream.outBody.append(contentsOf: bytes)
        nghttp2_session_resume_data(session, stream.id)
        scheduleFlush()
    }

    /// Ends a streaming response with `trailers` (END_STREAM on the trailers' HEADERS).
    func finishStreaming(_ stream: ServerStream, trailers: [HTTP2Header]) {
        guard phase == .open, let session, !stream.closed, stream.outOpen else { return }
        stream.outOpen = false
        stream.outTrailers = trailers
        nghttp2_session_resume_data(session, stream.id)
        scheduleFlush()
    }

    /// Registers `callback` for the stream's close; called at once when it is already closed.
    func onClose(_ stream: ServerStream, _ callback: @escaping @Sendable () -> Void) {
        if stream.closed { callback() } else { stream.onClose = callback }
    }

    func reset(_ stream: ServerStream, _ code: HTTP2ErrorCode) {
        guard phase == .open, let session, !stream.closed else { return }
        stream.responded = true
        nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.id, code.rawValue)
        scheduleFlush()
    }

    func goAway(lastStreamID: Int32?, errorCode: HTTP2ErrorCode, debugData: [UInt8]) {
        guard phase == .open, let session else { return }
        let last = lastStreamID ?? nghttp2_session_get_last_proc_stream_id(session)
        _ = debugData.withUnsafeBufferPointer { data in
            nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), last, errorCode.rawValue, data.baseAddress, data.count)
        }
        scheduleFlush()
    }

    func submitSettings(_ settings: [HTTP2Setting]) {
        guard phase == .open, let session else { return }
        var entries = settings.map { nghttp2_settings_entry(settings_id: $0.identifier.rawValue, value: $0.value) }
        nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entries, entries.count)
        scheduleFlush()
    }

    func drop() {
        closeConnection(HTTP2Error(.connectionClosed, "dropped by the server"), graceful: false)
    }

    var openStreamCount: Int { streams.count }
}

private let statusTexts: [String] = (0..<600).map { String($0) }

@inline(__always)
private func statusText(_ status: Int) -> String {
    status >= 0 && status < statusTexts.count ? statusTexts[status] : String(status)
}

@inline(__always)
private func core(_ userData: UnsafeMutableRawPointer?) -> ServerCore {
    Unmanaged<ServerCore>.fromOpaque(userData!).takeUnretainedValue()
}

@inline(__always)
private func stream(_ session: OpaquePointer?, _ streamID: Int32) -> ServerStream? {
    guard let pointer = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
    return Unmanaged<ServerStream>.fromOpaque(pointer).takeUnretainedValue()
}

private let failure = Int32(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
private let headersType = UInt8(NGHTTP2_HEADERS.rawValue)
private let dataType = UInt8(NGHTTP2_DATA.rawValue)
private let rstStreamType = UInt8(NGHTTP2_RST_STREAM.rawValue)
private let endStreamFlag = UInt8(NGHTTP2_FLAG_END_STREAM.rawValue)
/// A `content-type` value kept past the header-list limit, so that the limit's answer speaks the
/// request's protocol (gRPC or not); longer ones are dropped like any other field.
private let maxKeptContentTypeLength = 256

private func serverOnBeginHeaders(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    let connection = core(userData)
    guard connection.phase == .open, let frame else { return failure }
    guard frame.pointee.hd.type == headersType else { return 0 }
    if frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
        connection.beginStream(frame.pointee.hd.stream_id, hasBody: frame.pointee.hd.flags & endStreamFlag == 0)
    } else if let target = stream(session, frame.pointee.hd.stream_id) {
        target.headerBudget.restart()  // trailers: a header list of their own
    }
    return 0
}

private func serverOnHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int, _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let frame, let target = stream(session, frame.pointee.hd.stream_id), let name, !target.dispatched else { return 0 }
    let isRequest = frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST
    guard target.headerBudget.add(nameLength: nameLength, valueLength: valueLength) else {
        // Past the limit: stop storing (and free what was stored), keeping only a short content-type.
        if !target.headerListExceeded {
            target.headerListExceeded = true
            target.headers.removeAll { $0.name != "content-type" || $0.value.utf8.count > maxKeptContentTypeLength }
            target.trailers = []
        }
        if isRequest && nameLength == 12 && valueLength <= maxKeptContentTypeLength && makeString(name, nameLength) == "content-type"
            && !target.headers.contains(where: { $0.name == "content-type" }) {
            target.headers.append(HTTP2Header("content-type", makeString(value, valueLength)))
        }
        return 0
    }
    if !isRequest {
        target.trailers.append(HTTP2Header(makeString(name, nameLength), makeString(value, valueLength)))
        return 0
    }
    if nameLength > 1 && name[0] == 0x3A {  // ':'
        let text = makeString(value, valueLength)
        switch (nameLength, name[1]) {
        case (7, 0x6D): target.method = text       // :method
        case (5, 0x70): target.path = text         // :path
        case (10, 0x61): target.authority = text   // :authority
        case (7, 0x73): target.scheme = text       // :scheme
        default: break                             // :protocol (extended CONNECT) is not supported
        }
        return 0
    }
    target.headers.append(HTTP2Header(makeString(name, nameLength), makeString(value, valueLength)))
    return 0
}

private func serverOnDataChunk(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32, _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let target = stream(session, streamID), let data, !target.dispatched else {
        // Nobody keeps these bytes: give them back to both windows at once.
        nghttp2_session_consume(session, streamID, length)
        return 0
    }
    core(userData).receiveBody(target, data, length)
    return 0
}

private func serverOnFrameRecv(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    let connection = core(userData)
    guard connection.phase == .open, let frame else { return failure }
    let type = frame.pointee.hd.type
    guard type == headersType || type == dataType, let target = stream(session, frame.pointee.hd.stream_id) else { return 0 }
    if type == headersType { connection.headersDidEnd(target) }
    if frame.pointee.hd.flags & endStreamFlag != 0 {
        target.progress = nil
        connection.dispatch(target)
    }
    return connection.phase == .open ? 0 : failure
}

private func serverOnFrameSend(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame else { return 0 }
    let type = frame.pointee.hd.type
    if type == rstStreamType {
        if frame.pointee.rst_stream.error_code == HTTP2ErrorCode.refusedStream.rawValue {
            let connection = core(userData)
            connection.shared.accounting.breach(
                .maxConcurrentStreams, "stream refused above SETTINGS_MAX_CONCURRENT_STREAMS \(connection.shared.settings.maxConcurrentStreams)",
                remote: connection.remoteAddress)
        }
        return 0
    }
    guard type == headersType || type == dataType, frame.pointee.hd.flags & endStreamFlag != 0,
          let target = stream(session, frame.pointee.hd.stream_id), target.resetAfterResponse || target.lingering else { return 0 }
    core(userData).responseDidEnd(target)
    return 0
}

private func serverOnStreamClose(_ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    core(userData).endStream(streamID)
    return 0
}
