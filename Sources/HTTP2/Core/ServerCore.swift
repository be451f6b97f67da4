import Foundation
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
    var dispatched = false
    /// Called once when the stream closes (client reset, end, or connection closed); loop thread.
    var onClose: (@Sendable () -> Void)?

    func markClosed() {
        closed = true
        let callback = onClose
        onClose = nil
        callback?()
    }

    init(id: Int32) {
        self.id = id
        super.init()
        headers.reserveCapacity(8)
    }
}

/// State shared by every connection of one server: configuration, handler and the connection registry.
final class ServerShared: Sendable {
    let settings: HTTP2Settings
    let handler: HTTP2Server.Handler
    let tls: TLSContext?
    let maxRequestBodyBytes: Int
    let connections = Mutex<[UInt64: HTTP2ServerConnection]>([:])
    let nextConnectionID = Atomic<UInt64>(1)

    init(settings: HTTP2Settings, handler: @escaping HTTP2Server.Handler, tls: TLSContext?, maxRequestBodyBytes: Int) {
        self.settings = settings
        self.maxRequestBodyBytes = maxRequestBodyBytes
        self.handler = handler
        self.tls = tls
    }
}

/// The server half of one connection.
final class ServerCore: SessionCore, @unchecked Sendable {
    let id: UInt64
    let shared: ServerShared
    let remoteAddress: String
    private var streams: [Int32: ServerStream] = [:]
    private(set) var handle: HTTP2ServerConnection?

    init(id: UInt64, loop: EventLoop, transport: Transport, shared: ServerShared, remoteAddress: String) {
        self.id = id
        self.shared = shared
        self.remoteAddress = remoteAddress
        super.init(loop: loop, transport: transport, phase: .handshaking)
    }

    /// Runs on the loop thread: registers the socket and starts the TLS handshake (if any).
    func start() {
        guard register(writable: false) else {
            closeConnection(HTTP2Error(.internalError, "epoll_ctl failed"), graceful: false)
            return
        }
        beginHandshake()
    }

    override func handshakeDidComplete() -> HTTP2Error? {
        let handle = HTTP2ServerConnection(
            core: self, id: id, remoteAddress: remoteAddress,
            peerCertificate: transport.peerCertificate(), alpnProtocol: transport.alpnProtocol)
        self.handle = handle
        shared.connections.withLock { $0[id] = handle }
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
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, serverOnStreamClose)
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        defer { nghttp2_option_del(option) }
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
        shared.connections.withLock { _ = $0.removeValue(forKey: id) }
        // Keep this object alive until the end of the loop iteration: we may be inside a callback.
        loop.defer_ { [self] in _ = self.id }
    }

    // MARK: Callback entry points

    fileprivate func beginStream(_ streamID: Int32) {
        let stream = ServerStream(id: streamID)
        streams[streamID] = stream
        nghttp2_session_set_stream_user_data(session, streamID, Unmanaged.passUnretained(stream).toOpaque())
    }

    fileprivate func endStream(_ streamID: Int32) {
        if let stream = streams.removeValue(forKey: streamID) {
            stream.markClosed()
        }
    }

    fileprivate func dispatch(_ stream: ServerStream) {
        guard !stream.dispatched, let handle else { return }
        stream.dispatched = true
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

    /// Answers 413 before the body is complete (RFC 9113 §8.1 lets a server answer early) and drops
    /// what arrived; the rest of the body is read and discarded, so a client cannot make the server
    /// buffer an unbounded body, and clients that finish sending still read a clean 413.
    func refuseTooLarge(_ stream: ServerStream) {
        stream.dispatched = true
        stream.body = []
        respond(stream, HTTP2ServerResponse(status: 413, headers: [HTTP2Header("content-length", "0")]))
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
private let endStreamFlag = UInt8(NGHTTP2_FLAG_END_STREAM.rawValue)

private func serverOnBeginHeaders(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    let connection = core(userData)
    guard connection.phase == .open, let frame else { return failure }
    if frame.pointee.hd.type == headersType && frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
        connection.beginStream(frame.pointee.hd.stream_id)
    }
    return 0
}

private func serverOnHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int, _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let frame, let target = stream(session, frame.pointee.hd.stream_id), let name else { return 0 }
    if frame.pointee.headers.cat != NGHTTP2_HCAT_REQUEST {
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
    guard let target = stream(session, streamID), let data, !target.dispatched else { return 0 }
    let connection = core(userData)
    guard target.body.count + length <= connection.shared.maxRequestBodyBytes else {
        connection.refuseTooLarge(target)
        return 0
    }
    target.body.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
    return 0
}

private func serverOnFrameRecv(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    let connection = core(userData)
    guard connection.phase == .open, let frame else { return failure }
    let type = frame.pointee.hd.type
    guard (type == headersType || type == dataType), frame.pointee.hd.flags & endStreamFlag != 0 else { return 0 }
    if let target = stream(session, frame.pointee.hd.stream_id) {
        connection.dispatch(target)
    }
    return connection.phase == .open ? 0 : failure
}

private func serverOnStreamClose(_ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    core(userData).endStream(streamID)
    return 0
}
