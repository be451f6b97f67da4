import Foundation
import Synchronization
internal import CNghttp2

/// One request on the client side. Created on the caller's thread, then used only on the loop thread
/// (see `SessionCore`), which is why it is `@unchecked Sendable`.
final class ClientStream: OutboundStream, @unchecked Sendable {
    let request: HTTP2Request
    let timeout: Duration?
    var continuation: CheckedContinuation<HTTP2Response, any Error>?
    var result: Result<HTTP2Response, HTTP2Error>?
    var streamID: Int32 = -1
    var status = 0
    var headers: [HTTP2Header] = []
    var trailers: [HTTP2Header] = []
    var body: [UInt8] = []
    var timer: TimerToken?

    init(request: HTTP2Request, timeout: Duration?) {
        self.request = request
        self.timeout = timeout
        super.init()
        outBody = request.body
    }

    var finished: Bool { result != nil }

    func finish(_ result: Result<HTTP2Response, HTTP2Error>) {
        guard self.result == nil else { return }
        self.result = result
        timer?.cancel()
        timer = nil
        if let continuation {
            self.continuation = nil
            continuation.resume(with: result.mapError { $0 as any Error })
        }
    }

    func attach(_ continuation: CheckedContinuation<HTTP2Response, any Error>) {
        if let result {
            continuation.resume(with: result.mapError { $0 as any Error })
        } else {
            self.continuation = continuation
        }
    }
}

/// Counters the public `HTTP2Connection` reads from any thread; written on the loop thread.
final class ClientStats: Sendable {
    let openStreams = Atomic<Int>(0)
    let queuedRequests = Atomic<Int>(0)
    let maxConcurrentStreams = Atomic<Int>(100)
    let usable = Atomic<Bool>(false)
    /// `monotonicNanos()` when the last frame arrived (0: none yet).
    let lastFrameAt = Atomic<UInt64>(0)
}

/// The client half of one connection.
final class ClientCore: SessionCore, @unchecked Sendable {
    let host: String
    let port: Int
    let settings: HTTP2Settings
    let maxQueuedRequests: Int
    let stats = ClientStats()
    let events: AsyncStream<HTTP2ConnectionEvent>
    private let eventSink: AsyncStream<HTTP2ConnectionEvent>.Continuation
    private let defaultAuthority: String
    private let scheme: String
    private var connectContinuation: CheckedContinuation<Void, any Error>?
    private var connectTimer: TimerToken?
    private var receivedSettings = false
    private var streams: [Int32: ClientStream] = [:]
    private var queue: [ClientStream] = []
    private var queueHead = 0
    private var goAwayLastStreamID: Int32?
    private var closingRequested = false
    private var closeError: HTTP2Error?
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    private var pings: [UInt64: (start: UInt64, continuation: CheckedContinuation<Duration, any Error>)] = [:]
    private var nextPingID: UInt64 = 1
    private let ownsLoop: Bool

    init(loop: EventLoop, ownsLoop: Bool, transport: Transport, host: String, port: Int, configuration: HTTP2Connection.Configuration) {
        self.host = host
        self.port = port
        self.ownsLoop = ownsLoop
        self.settings = configuration.settings
        self.maxQueuedRequests = configuration.maxQueuedRequests
        let isDefaultPort = (configuration.tls != nil && port == 443) || (configuration.tls == nil && port == 80)
        let hostPart = host.contains(":") ? "[\(host)]" : host
        self.defaultAuthority = isDefaultPort ? hostPart : "\(hostPart):\(port)"
        self.scheme = configuration.tls == nil ? "http" : "https"
        (events, eventSink) = AsyncStream.makeStream(of: HTTP2ConnectionEvent.self, bufferingPolicy: .bufferingNewest(256))
        super.init(loop: loop, transport: transport, phase: .connecting)
    }

    // MARK: Connect

    /// Loop thread: registers the connecting socket and arms the connect timeout.
    func startConnect(timeout: Duration, continuation: CheckedContinuation<Void, any Error>) {
        connectContinuation = continuation
        guard register(writable: true) else {
            closeConnection(HTTP2Error(.connectFailed, "epoll_ctl failed"), graceful: false)
            return
        }
        connectTimer = loop.schedule(after: timeout) { [self] in
            closeConnection(HTTP2Error(.connectFailed, "connect to \(host):\(port) timed out after \(timeout)"), graceful: false)
        }
    }

    override func connectDidComplete(errorCode: Int32) {
        guard errorCode == 0 else {
            closeConnection(HTTP2Error(.connectFailed, "connect to \(host):\(port): \(errnoString(errorCode))"), graceful: false)
            return
        }
        beginHandshake()
    }

    override func handshakeDidComplete() -> HTTP2Error? {
        if transport.isTLS && transport.alpnProtocol != "h2" {
            return HTTP2Error(.alpnNotNegotiated, "\(host):\(port) did not select h2 through ALPN")
        }
        return nil
    }

    override func makeSession() -> OpaquePointer? {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return nil }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_header_callback(callbacks, clientOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, clientOnDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, clientOnFrameRecv)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, clientOnStreamClose)
        nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks, clientOnFrameNotSend)
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        defer { nghttp2_option_del(option) }
        var session: OpaquePointer?
        let rc = nghttp2_session_client_new2(&session, callbacks, Unmanaged.passUnretained(self).toOpaque(), option)
        return rc == 0 ? session : nil
    }

    override func sessionDidStart() {
        submitInitialSettings(settings, isServer: false)
    }

    override func connectionDidClose(_ error: HTTP2Error?) {
        connectTimer?.cancel()
        stats.usable.store(false, ordering: .relaxed)
        let failure = error ?? HTTP2Error(.connectionClosed, "connection closed")
        closeError = failure
        if let continuation = connectContinuation {
            connectContinuation = nil
            continuation.resume(throwing: failure)
        }
        let open = streams
        streams.removeAll()
        for stream in open.values {
            stream.finish(.failure(HTTP2Error(failure.code == .connectionClosed ? .connectionClosed : failure.code,
                                              "connection closed with the request in flight: \(failure.message)")))
        }
        // Never handed to nghttp2, so never on the wire: safe to send elsewhere (not processed).
        failQueue(HTTP2Error(.goingAway, "connection closed before the request was sent: \(failure.message)"))
        for (_, ping) in pings { ping.continuation.resume(throwing: failure) }
        pings.removeAll()
        stats.openStreams.store(0, ordering: .relaxed)
        if receivedSettings { eventSink.yield(.closed(error)) }
        eventSink.finish()
        for waiter in closeWaiters { waiter.resume() }
        closeWaiters.removeAll()
        loop.defer_ { [self] in
            if ownsLoop { loop.stop() }
        }
    }

    // MARK: Requests (loop thread)

    func submit(_ stream: ClientStream) {
        if stream.finished { return }
        if phase != .open || !receivedSettings {
            stream.finish(.failure(closeError ?? HTTP2Error(.connectionClosed, "connection is not open")))
            return
        }
        if goAwayLastStreamID != nil || closingRequested {
            stream.finish(.failure(HTTP2Error(.goingAway, "connection is going away; request not sent")))
            return
        }
        if let timeout = stream.timeout {
            stream.timer = loop.schedule(after: timeout) { [self] in self.timeOut(stream) }
        }
        if streams.count < maxConcurrent && queueCount == 0 {
            start(stream)
        } else if queueCount >= maxQueuedRequests {
            stream.finish(.failure(HTTP2Error(.tooManyQueuedRequests, "\(queueCount) requests already wait for a stream")))
        } else {
            queue.append(stream)
            stats.queuedRequests.store(queueCount, ordering: .relaxed)
        }
    }

    private var maxConcurrent: Int { Int(stats.maxConcurrentStreams.load(ordering: .relaxed)) }
    private var queueCount: Int { queue.count - queueHead }

    private func start(_ stream: ClientStream) {
        guard let session else { return }
        let request = stream.request
        let pseudo = [(":method", request.method), (":scheme", scheme), (":authority", request.authority ?? defaultAuthority), (":path", request.path)]
        let userData = Unmanaged.passUnretained(stream).toOpaque()
        let streamID: Int32 = withHeaderBlock(pseudo: pseudo, headers: request.headers) { nva, count in
            if request.body.isEmpty {
                return nghttp2_submit_request(session, nil, nva, count, nil, userData)
            }
            var provider = nghttp2_data_provider()
            provider.read_callback = dataSourceRead
            return nghttp2_submit_request(session, nil, nva, count, &provider, userData)
        }
        guard streamID > 0 else {
            stream.finish(.failure(HTTP2Error(.invalidRequest, "nghttp2_submit_request: \(String(cString: nghttp2_strerror(streamID)))")))
            return
        }
        stream.streamID = streamID
        streams[streamID] = stream
        stats.openStreams.store(streams.count, ordering: .relaxed)
        scheduleFlush()
    }

    private func startQueued() {
        while queueHead < queue.count && streams.count < maxConcurrent && phase == .open {
            let next = queue[queueHead]
            queueHead += 1
            if !next.finished { start(next) }
        }
        if queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
        } else if queueHead > 1024 && queueHead * 2 > queue.count {
            queue.removeFirst(queueHead)
            queueHead = 0
        }
        stats.queuedRequests.store(queueCount, ordering: .relaxed)
    }

    private func failQueue(_ error: HTTP2Error) {
        for index in queueHead..<queue.count { queue[index].finish(.failure(error)) }
        queue.removeAll()
        queueHead = 0
        stats.queuedRequests.store(0, ordering: .relaxed)
    }

    private func timeOut(_ stream: ClientStream) {
        guard !stream.finished else { return }
        stream.finish(.failure(HTTP2Error(.timeout, "no response within \(stream.timeout ?? .zero)")))
        resetIfOpen(stream)
    }

    func cancel(_ stream: ClientStream) {
        guard !stream.finished else { return }
        stream.finish(.failure(HTTP2Error(.cancelled, "the request's task was cancelled")))
        resetIfOpen(stream)
    }

    private func resetIfOpen(_ stream: ClientStream) {
        if stream.streamID > 0, streams[stream.streamID] != nil, let session {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.streamID, HTTP2ErrorCode.cancel.rawValue)
            scheduleFlush()
        }
        // A queued stream is skipped by startQueued because it is finished.
    }

    func ping(_ continuation: CheckedContinuation<Duration, any Error>) {
        guard phase == .open, let session else {
            continuation.resume(throwing: closeError ?? HTTP2Error(.connectionClosed, "connection is not open"))
            return
        }
        let id = nextPingID
        nextPingID += 1
        let opaque = pingOpaqueData(id)
        let rc = opaque.withUnsafeBufferPointer { nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), $0.baseAddress) }
        guard rc == 0 else {
            continuation.resume(throwing: HTTP2Error(.internalError, "nghttp2_submit_ping failed"))
            return
        }
        pings[id] = (monotonicNanos(), continuation)
        scheduleFlush()
    }

    /// Graceful close: no new streams, GOAWAY(NO_ERROR), close once open streams finished.
    func close(_ waiter: CheckedContinuation<Void, Never>) {
        guard phase != .closed else {
            waiter.resume()
            return
        }
        closeWaiters.append(waiter)
        guard !closingRequested else { return }
        closingRequested = true
        stats.usable.store(false, ordering: .relaxed)
        failQueue(HTTP2Error(.goingAway, "connection is closing; request not sent"))
        guard phase == .open, let session else {
            closeConnection(nil, graceful: false)
            return
        }
        nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nghttp2_session_get_last_proc_stream_id(session), 0, nil, 0)
        scheduleFlush()
    }

    func closeNow() {
        closeConnection(nil, graceful: false)
    }

    /// Closes at once (no GOAWAY, no waiting for streams): open streams fail with `error`'s code.
    func abort(_ error: HTTP2Error) {
        closeConnection(error, graceful: false)
    }

    // MARK: Callback entry points

    fileprivate func streamClosed(_ streamID: Int32, errorCode: UInt32) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        stats.openStreams.store(streams.count, ordering: .relaxed)
        if !stream.finished {
            let code = HTTP2ErrorCode(rawValue: errorCode)
            if let last = goAwayLastStreamID, streamID > last {
                stream.finish(.failure(HTTP2Error(.streamRefused, "stream \(streamID) is above GOAWAY last-stream-id \(last); not processed", http2ErrorCode: code)))
            } else if code == .refusedStream {
                stream.finish(.failure(HTTP2Error(.streamRefused, "stream \(streamID) refused by the peer; not processed", http2ErrorCode: code)))
            } else {
                stream.finish(.failure(HTTP2Error(.streamReset, "stream \(streamID) reset by the peer", http2ErrorCode: code)))
            }
        }
        startQueued()
    }

    fileprivate func frameNotSent(_ streamID: Int32, libraryError: Int32) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        stats.openStreams.store(streams.count, ordering: .relaxed)
        if libraryError == NGHTTP2_ERR_START_STREAM_NOT_ALLOWED.rawValue || libraryError == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue {
            stream.finish(.failure(HTTP2Error(.goingAway, "connection is going away; request not sent")))
        } else {
            stream.finish(.failure(HTTP2Error(.invalidRequest, "request not sent: \(String(cString: nghttp2_strerror(libraryError)))")))
        }
        startQueued()
    }

    fileprivate func settingsReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        guard let session else { return }
        let max = nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
        stats.maxConcurrentStreams.store(Int(min(max, UInt32(Int32.max))), ordering: .relaxed)
        var list: [HTTP2Setting] = []
        let count = frame.pointee.settings.niv
        if count > 0, let entries = frame.pointee.settings.iv {
            for i in 0..<count {
                list.append(HTTP2Setting(.init(rawValue: entries[i].settings_id), entries[i].value))
            }
        }
        if !receivedSettings {
            receivedSettings = true
            connectTimer?.cancel()
            stats.usable.store(!closingRequested, ordering: .relaxed)
            if let continuation = connectContinuation {
                connectContinuation = nil
                continuation.resume()
            }
        }
        eventSink.yield(.settingsChanged(maxConcurrentStreams: Int(min(max, UInt32(Int32.max))), settings: list))
        startQueued()
    }

    fileprivate func goAwayReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let last = frame.pointee.goaway.last_stream_id
        goAwayLastStreamID = last
        stats.usable.store(false, ordering: .relaxed)
        let code = HTTP2ErrorCode(rawValue: frame.pointee.goaway.error_code)
        var debug: [UInt8] = []
        if frame.pointee.goaway.opaque_data_len > 0, let data = frame.pointee.goaway.opaque_data {
            debug = Array(UnsafeBufferPointer(start: data, count: frame.pointee.goaway.opaque_data_len))
        }
        eventSink.yield(.goAwayReceived(lastStreamID: last, errorCode: code, debugData: debug))
        failQueue(HTTP2Error(.goingAway, "peer sent GOAWAY (\(code)); request not sent", http2ErrorCode: code))
        for (id, stream) in streams where id > last {
            stream.finish(.failure(HTTP2Error(.streamRefused, "stream \(id) is above GOAWAY last-stream-id \(last); not processed", http2ErrorCode: code)))
        }
    }

    fileprivate func pingAck(_ frame: UnsafePointer<nghttp2_frame>) {
        let id = pingID(opaqueData: frame.pointee.ping.opaque_data)
        guard let entry = pings.removeValue(forKey: id) else { return }
        entry.continuation.resume(returning: .nanoseconds(Int64(monotonicNanos() - entry.start)))
    }

    fileprivate func responseEnded(_ stream: ClientStream) {
        stream.finish(.success(HTTP2Response(status: stream.status, headers: stream.headers, body: stream.body, trailers: stream.trailers, streamID: stream.streamID)))
    }
}

/// The 8 bytes of PING opaque data (RFC 9113 §6.7) carrying `id`, big-endian.
func pingOpaqueData(_ id: UInt64) -> [UInt8] {
    (0..<8).map { UInt8(truncatingIfNeeded: id >> (56 - 8 * UInt64($0))) }
}

/// The id in a PING ACK's opaque data, read byte by byte from the imported C array (a tuple).
///
/// Not through `withUnsafeBytes(of:)` and `loadUnaligned`: with that, release builds (Swift 6.3,
/// `-O`) dropped the read entirely (the frame became a dead argument and the dictionary look-up used
/// an undefined key), so no ACK ever matched and every idle connection's PING "timed out".
func pingID(opaqueData o: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8)) -> UInt64 {
    var id = UInt64(o.0) << 56 | UInt64(o.1) << 48 | UInt64(o.2) << 40 | UInt64(o.3) << 32
    id |= UInt64(o.4) << 24 | UInt64(o.5) << 16 | UInt64(o.6) << 8 | UInt64(o.7)
    return id
}

@inline(__always)
private func core(_ userData: UnsafeMutableRawPointer?) -> ClientCore {
    Unmanaged<ClientCore>.fromOpaque(userData!).takeUnretainedValue()
}

@inline(__always)
private func stream(_ session: OpaquePointer?, _ streamID: Int32) -> ClientStream? {
    guard let pointer = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
    return Unmanaged<ClientStream>.fromOpaque(pointer).takeUnretainedValue()
}

private let failure = Int32(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)

private func clientOnHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int, _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
          let target = stream(session, frame.pointee.hd.stream_id), let name else { return 0 }
    if frame.pointee.headers.cat == NGHTTP2_HCAT_HEADERS && target.status >= 200 {
        target.trailers.append(HTTP2Header(makeString(name, nameLength), makeString(value, valueLength)))
        return 0
    }
    if nameLength == 7 && name[0] == 0x3A && name[1] == 0x73 {  // ":status"
        let status = Int(makeString(value, valueLength)) ?? 0
        if status >= 200 || target.status == 0 { target.headers.removeAll() }
        target.status = status
        return 0
    }
    target.headers.append(HTTP2Header(makeString(name, nameLength), makeString(value, valueLength)))
    return 0
}

private func clientOnDataChunk(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32, _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let target = stream(session, streamID), let data else { return 0 }
    target.body.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
    return 0
}

private func clientOnFrameRecv(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    let connection = core(userData)
    guard let frame, connection.phase == .open else { return failure }
    connection.stats.lastFrameAt.store(monotonicNanos(), ordering: .relaxed)
    let type = UInt32(frame.pointee.hd.type)
    let flags = UInt32(frame.pointee.hd.flags)
    switch type {
    case NGHTTP2_HEADERS.rawValue, NGHTTP2_DATA.rawValue:
        if flags & NGHTTP2_FLAG_END_STREAM.rawValue != 0, let target = stream(session, frame.pointee.hd.stream_id) {
            connection.responseEnded(target)
        }
    case NGHTTP2_SETTINGS.rawValue:
        if flags & NGHTTP2_FLAG_ACK.rawValue == 0 { connection.settingsReceived(frame) }
    case NGHTTP2_GOAWAY.rawValue:
        connection.goAwayReceived(frame)
    case NGHTTP2_PING.rawValue:
        if flags & NGHTTP2_FLAG_ACK.rawValue != 0 { connection.pingAck(frame) }
    default:
        break
    }
    return 0
}

private func clientOnStreamClose(_ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    core(userData).streamClosed(streamID, errorCode: errorCode)
    return 0
}

private func clientOnFrameNotSend(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ libraryError: Int32, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
    core(userData).frameNotSent(frame.pointee.hd.stream_id, libraryError: libraryError)
    return 0
}
