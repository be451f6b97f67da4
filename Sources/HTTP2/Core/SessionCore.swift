import Foundation
internal import CNghttp2

/// The part of a connection shared by client and server: a `Transport`, an nghttp2 session driven with
/// `nghttp2_session_mem_recv` / `mem_send`, an output buffer, and registration with an event loop.
///
/// Thread-confinement: every member is used only on `loop`'s thread (nghttp2 sessions are not
/// thread-safe, and OpenSSL's error queue is per thread). Public handles reach it only through
/// `loop.execute`, which is why subclasses may be `@unchecked Sendable`.
class SessionCore: EventLoopHandler, @unchecked Sendable {
    enum Phase { case connecting, handshaking, open, closed }

    let loop: EventLoop
    let transport: Transport
    var phase: Phase
    var session: OpaquePointer?
    private var output: [UInt8] = []
    private var outputOffset = 0
    private var writeInterest = false
    private var flushScheduled = false
    private var readWantsWrite = false
    /// Set while a graceful close lingers: the socket's sending side is shut, its reads are dropped.
    private var lingerTimer: TimerToken?
    /// How long a graceful close keeps reading before it closes the socket anyway.
    static let lingerTimeout: Duration = .seconds(2)
    /// Whether a graceful close lingers; a server turns it off for connections it ends itself (idle,
    /// evicted, shutting down), so a flood of idle peers cannot hold descriptors past the limits.
    var lingersOnGracefulClose = true
    /// Scratch storage to build header blocks without allocating per call.
    private var nvBytes: [UInt8] = []
    private var nvArray: [nghttp2_nv] = []

    init(loop: EventLoop, transport: Transport, phase: Phase) {
        self.loop = loop
        self.transport = transport
        self.phase = phase
        output.reserveCapacity(64 * 1024)
    }

    // MARK: Subclass hooks

    /// Creates the nghttp2 session (after the TLS handshake). Returns nil on failure.
    func makeSession() -> OpaquePointer? { nil }
    /// The session is ready and the initial SETTINGS were submitted.
    func sessionDidStart() {}
    /// The TLS handshake (if any) finished; return an error to refuse the connection.
    func handshakeDidComplete() -> HTTP2Error? { nil }
    /// The connection closed; `error` is nil for an orderly close.
    func connectionDidClose(_ error: HTTP2Error?) {}
    /// A non-blocking connect completed (client only).
    func connectDidComplete(errorCode: Int32) {}

    // MARK: Start

    /// Registers with the loop. For servers and after a client's connect.
    func register(writable: Bool) -> Bool {
        // Keep `writeInterest` in step with the registration: a client registers for EPOLLOUT to
        // learn that its connect finished, and `setWriteInterest(false)` must then really turn it
        // off (otherwise the level-triggered EPOLLOUT wakes the loop without end).
        writeInterest = writable
        return loop.register(fd: transport.fd, handler: self, writable: writable)
    }

    func beginHandshake() {
        phase = .handshaking
        continueHandshake()
    }

    private func continueHandshake() {
        switch transport.handshake() {
        case .done:
            if let error = handshakeDidComplete() {
                closeConnection(error, graceful: false)
                return
            }
            guard let session = makeSession() else {
                closeConnection(HTTP2Error(.internalError, "cannot create nghttp2 session"), graceful: false)
                return
            }
            self.session = session
            phase = .open
            sessionDidStart()
            setWriteInterest(false)
            flush()
            // TLS may already hold application data read with the handshake.
            if phase == .open { readAvailable() }
            scheduleFlush()
        case .wantRead:
            setWriteInterest(false)
        case .wantWrite:
            setWriteInterest(true)
        case .failed(let error):
            closeConnection(error, graceful: false)
        }
    }

    // MARK: EventLoopHandler

    func handleEvent(readable: Bool, writable: Bool) {
        switch phase {
        case .connecting:
            connectDidComplete(errorCode: SocketOps.socketError(transport.fd))
        case .handshaking:
            continueHandshake()
        case .open:
            if writable && writeInterest {
                if readWantsWrite {
                    readWantsWrite = false
                    readAvailable()
                }
                if !drainOutput() { return }
                scheduleFlush()
            }
            if readable {
                readAvailable()
                scheduleFlush()
            }
        case .closed:
            if readable, lingerTimer != nil, transport.discardIncoming(into: loop.readBuffer) { finishLinger() }
        }
    }

    private func readAvailable() {
        let buffer = loop.readBuffer
        while phase == .open, let session {
            switch transport.read(into: buffer) {
            case .bytes(let count):
                let rc = nghttp2_session_mem_recv(session, buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), count)
                if rc < 0 {
                    if phase != .open { return }
                    let text = String(cString: nghttp2_strerror(Int32(rc)))
                    // Let nghttp2 send its GOAWAY (it queues one for protocol errors), then close.
                    flushOutputBestEffort()
                    closeConnection(HTTP2Error(.protocolError, "HTTP/2 session error: \(text)"), graceful: false)
                    return
                }
                if count < buffer.count && !transport.isTLS { return }
            case .wouldBlock(let wantsWrite):
                if wantsWrite {
                    readWantsWrite = true
                    setWriteInterest(true)
                }
                return
            case .closed:
                closeConnection(HTTP2Error(.connectionClosed, "peer closed the connection"), graceful: false)
                return
            case .failed(let message):
                closeConnection(HTTP2Error(.connectionClosed, message), graceful: false)
                return
            }
        }
    }

    /// Asks for `flush()` at the end of the current loop iteration.
    final func scheduleFlush() {
        guard !flushScheduled, phase == .open else { return }
        flushScheduled = true
        loop.scheduleFlush(self)
    }

    /// Serializes everything nghttp2 has queued and writes it.
    func flush() {
        flushScheduled = false
        guard phase == .open, let session else { return }
        while true {
            while output.count - outputOffset < 256 * 1024 {
                var data: UnsafePointer<UInt8>?
                let count = nghttp2_session_mem_send(session, &data)
                if count < 0 {
                    closeConnection(HTTP2Error(.protocolError, "nghttp2_session_mem_send: \(String(cString: nghttp2_strerror(Int32(count))))"), graceful: false)
                    return
                }
                if count == 0 { break }
                output.append(contentsOf: UnsafeBufferPointer(start: data, count: count))
                if phase != .open { return }
            }
            if outputOffset == output.count { break }
            if !drainOutput() { return }
        }
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            closeConnection(nil, graceful: true)
        }
    }

    /// Writes buffered output. Returns false when the socket would block or the connection closed.
    private func drainOutput() -> Bool {
        while outputOffset < output.count {
            let result = output.withUnsafeBytes { raw in
                transport.write(UnsafeRawBufferPointer(rebasing: raw[outputOffset...]))
            }
            switch result {
            case .bytes(let count):
                outputOffset += count
            case .wouldBlock:
                setWriteInterest(true)
                return false
            case .closed:
                closeConnection(HTTP2Error(.connectionClosed, "peer closed the connection while we were writing"), graceful: false)
                return false
            case .failed(let message):
                closeConnection(HTTP2Error(.connectionClosed, message), graceful: false)
                return false
            }
        }
        output.removeAll(keepingCapacity: true)
        outputOffset = 0
        if writeInterest && !readWantsWrite { setWriteInterest(false) }
        return true
    }

    /// Tries once to write what nghttp2 queued (a GOAWAY after a protocol error) before closing.
    private func flushOutputBestEffort() {
        guard let session else { return }
        while true {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &data)
            if count <= 0 { break }
            output.append(contentsOf: UnsafeBufferPointer(start: data, count: count))
        }
        _ = drainOutput()
    }

    private func setWriteInterest(_ on: Bool) {
        guard on != writeInterest, !transport.isClosed else { return }
        writeInterest = on
        loop.modify(fd: transport.fd, writable: on)
    }

    /// Closes the socket and ends the session. Safe to call from inside nghttp2 callbacks: the session
    /// is freed later in the loop iteration.
    ///
    /// A graceful close lingers (RFC 9112 §9.6, "the TCP reset problem"): closing a socket whose receive
    /// buffer holds unread bytes makes the kernel answer with RST, and a RST can destroy the last frames
    /// sent (responses, the GOAWAY) before the peer read them; a client that then loses answers to
    /// streams at or below the GOAWAY's last-stream-id must send those again. So the sending side is
    /// shut first (close_notify, FIN), and the socket is read and its bytes dropped until the peer
    /// closes too or `lingerTimeout` passes.
    func closeConnection(_ error: HTTP2Error?, graceful: Bool) {
        guard phase != .closed else { return }
        phase = .closed
        if graceful, lingersOnGracefulClose, transport.shutdownSending() {
            setWriteInterest(false)
            lingerTimer = loop.schedule(after: Self.lingerTimeout) { [weak self] in self?.finishLinger() }
        } else {
            loop.deregister(fd: transport.fd)
            transport.closeNow()
        }
        connectionDidClose(error)
        if let session {
            self.session = nil
            let box = SessionBox(session)
            loop.defer_ { nghttp2_session_del(box.session) }
        }
    }

    /// Ends a lingering close: the socket is closed and leaves the loop.
    private func finishLinger() {
        guard let timer = lingerTimer else { return }
        timer.cancel()
        lingerTimer = nil
        loop.deregister(fd: transport.fd)
        transport.closeNow()
    }

    // MARK: Helpers for subclasses

    /// Calls `body` with an nghttp2 name/value array for `pseudo` then `headers`. Names are lowercased.
    func withHeaderBlock<T>(pseudo: [(String, String)], headers: [HTTP2Header], _ body: (UnsafePointer<nghttp2_nv>, Int) -> T) -> T {
        // Work on local copies of the reusable buffers (swapped out and back): appending to a
        // class property byte by byte pays an exclusivity check per byte.
        var bytes: [UInt8] = []
        var array: [nghttp2_nv] = []
        swap(&bytes, &nvBytes)
        swap(&array, &nvArray)
        defer {
            swap(&bytes, &nvBytes)
            swap(&array, &nvArray)
        }
        bytes.removeAll(keepingCapacity: true)
        var spans: [(Int, Int, Int, Int)] = []
        spans.reserveCapacity(pseudo.count + headers.count)
        func append(_ name: String, _ value: String) {
            let nameStart = bytes.count
            bytes.append(contentsOf: name.utf8)
            for index in nameStart..<bytes.count where bytes[index] >= 0x41 && bytes[index] <= 0x5A {
                bytes[index] |= 0x20
            }
            let valueStart = bytes.count
            bytes.append(contentsOf: value.utf8)
            spans.append((nameStart, valueStart - nameStart, valueStart, bytes.count - valueStart))
        }
        for (name, value) in pseudo { append(name, value) }
        for header in headers { append(header.name, header.value) }
        bytes.append(0)  // never empty, so baseAddress is non-nil
        return bytes.withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            array.removeAll(keepingCapacity: true)
            for span in spans {
                array.append(nghttp2_nv(
                    name: base + span.0, value: base + span.2, namelen: span.1, valuelen: span.3,
                    flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
            }
            return array.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
        }
    }

    /// Submits SETTINGS and opens the connection receive window.
    func submitInitialSettings(_ settings: HTTP2Settings, isServer: Bool) {
        guard let session else { return }
        var entries: [nghttp2_settings_entry] = [
            .init(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: settings.maxConcurrentStreams),
            .init(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: settings.initialWindowSize),
            .init(settings_id: Int32(NGHTTP2_SETTINGS_MAX_FRAME_SIZE.rawValue), value: settings.maxFrameSize),
            .init(settings_id: Int32(NGHTTP2_SETTINGS_HEADER_TABLE_SIZE.rawValue), value: settings.headerTableSize),
        ]
        if !isServer {
            entries.append(.init(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0))
        }
        if let limit = settings.maxHeaderListSize {
            entries.append(.init(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: limit))
        }
        nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entries, entries.count)
        if settings.connectionWindowSize > 65_535 {
            nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(clamping: settings.connectionWindowSize))
        }
    }
}

/// Carries a session pointer into a deferred job on the same loop thread.
private struct SessionBox {
    let session: OpaquePointer
    init(_ session: OpaquePointer) { self.session = session }
}

/// Outbound body state shared by client requests and server responses, read by `dataSourceRead`.
/// Lives (through the owning core's stream table) until the stream closes.
class OutboundStream {
    var outBody: [UInt8] = []
    var outOffset = 0
    var outTrailers: [HTTP2Header]?
    /// A streaming response whose end has not been submitted: when the body runs out, the data
    /// source defers (NGHTTP2_ERR_DEFERRED) until more arrives and `nghttp2_session_resume_data`.
    var outOpen = false
}

/// nghttp2 data source: copies the next chunk of the stream's body; at the end submits trailers
/// (with NO_END_STREAM so that the trailers' HEADERS carries END_STREAM).
func dataSourceRead(
    _ session: OpaquePointer?, _ streamID: Int32, _ buffer: UnsafeMutablePointer<UInt8>?, _ length: Int,
    _ flags: UnsafeMutablePointer<UInt32>?, _ source: UnsafeMutablePointer<nghttp2_data_source>?,
    _ userData: UnsafeMutableRawPointer?
) -> Int {
    guard let pointer = nghttp2_session_get_stream_user_data(session, streamID) else {
        return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
    }
    let stream = Unmanaged<OutboundStream>.fromOpaque(pointer).takeUnretainedValue()
    if stream.outOpen && stream.outOffset == stream.outBody.count {
        stream.outBody.removeAll(keepingCapacity: true)
        stream.outOffset = 0
        return Int(NGHTTP2_ERR_DEFERRED.rawValue)
    }
    let remaining = stream.outBody.count - stream.outOffset
    let count = min(remaining, length)
    if count > 0, let buffer {
        stream.outBody.withUnsafeBytes { raw in
            buffer.update(from: raw.baseAddress!.assumingMemoryBound(to: UInt8.self) + stream.outOffset, count: count)
        }
        stream.outOffset += count
    }
    if stream.outOffset == stream.outBody.count && !stream.outOpen {
        flags?.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
        if let trailers = stream.outTrailers, !trailers.isEmpty, let userData {
            let core = Unmanaged<SessionCore>.fromOpaque(userData).takeUnretainedValue()
            flags?.pointee |= NGHTTP2_DATA_FLAG_NO_END_STREAM.rawValue
            let rc = core.withHeaderBlock(pseudo: [], headers: trailers) { nva, count in
                nghttp2_submit_trailer(session, streamID, nva, count)
            }
            if rc != 0 { return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) }
        }
    }
    return count
}

/// Makes a `String` from bytes nghttp2 hands to a callback.
@inline(__always)
func makeString(_ pointer: UnsafePointer<UInt8>?, _ count: Int) -> String {
    guard let pointer, count > 0 else { return "" }
    return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
}
