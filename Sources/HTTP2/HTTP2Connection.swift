import Foundation
import ServiceCore

/// Something that happened on a client connection, for pools that react (see `HTTP2Connection.events`).
public enum HTTP2ConnectionEvent: Sendable {
    /// The server sent SETTINGS (RFC 9113 §6.5). `maxConcurrentStreams` is the peer's current
    /// SETTINGS_MAX_CONCURRENT_STREAMS after applying the frame; `settings` lists the frame's entries.
    case settingsChanged(maxConcurrentStreams: Int, settings: [HTTP2Setting])
    /// The server sent GOAWAY (RFC 9113 §6.8): streams above `lastStreamID` were not processed and
    /// failed with `.streamRefused`; no new request is accepted. `debugData` is the frame's opaque data.
    case goAwayReceived(lastStreamID: Int32, errorCode: HTTP2ErrorCode, debugData: [UInt8])
    /// The connection closed; `error` is nil for an orderly close (GOAWAY and streams done, or `close()`).
    case closed(HTTP2Error?)
}

/// A client HTTP/2 connection over TLS (ALPN `h2`) or cleartext with prior knowledge (h2c).
///
/// One thread of its own owns the socket, the TLS session and the nghttp2 session; `send` hands each
/// request to it through a queue. The connection counts its own open streams against the server's
/// SETTINGS_MAX_CONCURRENT_STREAMS and keeps extra requests in its own FIFO (bounded by
/// `Configuration.maxQueuedRequests`) instead of letting nghttp2 queue them.
public final class HTTP2Connection: Sendable {
    /// Client configuration.
    public struct Configuration: Sendable {
        /// TLS options; nil means cleartext HTTP/2 with prior knowledge (h2c). Default nil.
        public var tls: HTTP2ClientTLS?
        /// Local SETTINGS (our receive windows, and the streams the server may open: push is disabled).
        public var settings = HTTP2Settings()
        /// Time allowed for TCP connect, TLS handshake and the server's first SETTINGS. Default 10 s.
        public var connectTimeout: Duration = .seconds(10)
        /// Requests allowed to wait for a free stream before `send` fails with
        /// `.tooManyQueuedRequests`. Default 100,000.
        public var maxQueuedRequests: Int = 100_000

        /// Creates a configuration.
        public init(tls: HTTP2ClientTLS? = nil, settings: HTTP2Settings = HTTP2Settings(), connectTimeout: Duration = .seconds(10), maxQueuedRequests: Int = 100_000) {
            self.tls = tls
            self.settings = settings
            self.connectTimeout = connectTimeout
            self.maxQueuedRequests = maxQueuedRequests
        }
    }

    private let core: ClientCore
    /// The host given to `connect`.
    public let host: String
    /// The port given to `connect`.
    public let port: Int

    private init(core: ClientCore, host: String, port: Int) {
        self.core = core
        self.host = host
        self.port = port
    }

    deinit {
        let core = self.core
        core.loop.execute { core.closeNow() }
    }

    /// Connects, performs the TLS handshake (verifying the server unless disabled), checks ALPN `h2`,
    /// sends the connection preface and waits for the server's first SETTINGS.
    /// - Throws: `HTTP2Error` with `.connectFailed`, `.certificateVerificationFailed`,
    ///   `.tlsHandshakeFailed`, `.alpnNotNegotiated`, `.invalidConfiguration` or `.connectionClosed`.
    public static func connect(host: String, port: Int, configuration: Configuration = Configuration()) async throws -> HTTP2Connection {
        ProcessSignals.ignoreSIGPIPE()
        let tls = try configuration.tls.map { options throws(HTTP2Error) in try TLSContext.client(options) }
        let addresses = try await SocketOps.resolveAsync(host: host, port: port)
        var lastError: (any Error)?
        for address in addresses {
            do {
                return try await connect(address: address, host: host, port: port, tlsContext: tls, configuration: configuration)
            } catch let error as HTTP2Error where error.code == .connectFailed {
                lastError = error
            }
        }
        throw lastError ?? HTTP2Error(.connectFailed, "no address for \(host)")
    }

    private static func connect(address: SocketOps.Address, host: String, port: Int, tlsContext: TLSContext?, configuration: Configuration) async throws -> HTTP2Connection {
        let fd = try SocketOps.startConnect(address)
        let serverName = configuration.tls?.serverName ?? host
        let transport = try Transport(
            fd: fd, context: tlsContext, isServer: false, serverName: serverName,
            verifyHost: configuration.tls?.verifyPeer == true ? serverName : nil)
        let loop = try EventLoop(name: "http2-client-\(host):\(port)")
        let core = ClientCore(loop: loop, ownsLoop: true, transport: transport, host: host, port: port, configuration: configuration)
        let connection = HTTP2Connection(core: core, host: host, port: port)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            if !loop.execute({ core.startConnect(timeout: configuration.connectTimeout, continuation: continuation) }) {
                continuation.resume(throwing: HTTP2Error(.connectionClosed, "event loop stopped"))
            }
        }
        return connection
    }

    /// Sends `request` on a new stream and waits for the complete response (headers, body, trailers).
    ///
    /// When the server's SETTINGS_MAX_CONCURRENT_STREAMS streams are open, the request waits in the
    /// connection's FIFO. `timeout` covers the waiting and the exchange; when it elapses (or the task is
    /// cancelled) the stream is reset with RST_STREAM(CANCEL).
    /// - Throws: `HTTP2Error`: `.timeout`, `.cancelled`, `.streamRefused` (safe to retry: not
    ///   processed), `.goingAway` (not sent), `.streamReset`, `.connectionClosed`,
    ///   `.tooManyQueuedRequests`, `.invalidRequest`.
    public func send(_ request: HTTP2Request, timeout: Duration? = nil) async throws -> HTTP2Response {
        let stream = ClientStream(request: request, timeout: timeout)
        let core = self.core
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTP2Response, any Error>) in
                let accepted = core.loop.execute {
                    stream.attach(continuation)
                    core.submit(stream)
                }
                if !accepted {
                    continuation.resume(throwing: HTTP2Error(.connectionClosed, "connection is closed"))
                }
            }
        } onCancel: {
            core.loop.execute { core.cancel(stream) }
        }
    }

    /// Sends PING (RFC 9113 §6.7) and returns the round-trip time until its ACK.
    /// - Throws: `HTTP2Error` `.connectionClosed` when the connection closes first.
    public func ping() async throws -> Duration {
        let core = self.core
        return try await withCheckedThrowingContinuation { continuation in
            if !core.loop.execute({ core.ping(continuation) }) {
                continuation.resume(throwing: HTTP2Error(.connectionClosed, "connection is closed"))
            }
        }
    }

    /// Events (SETTINGS, GOAWAY, close) in order. Single consumer; keeps the newest 256 when not read.
    /// Finishes after `.closed`.
    public var events: AsyncStream<HTTP2ConnectionEvent> { core.events }

    /// Streams currently open on this connection (as counted by us).
    public var openStreams: Int { core.stats.openStreams.load(ordering: .relaxed) }

    /// Requests waiting in our FIFO for a free stream.
    public var queuedRequests: Int { core.stats.queuedRequests.load(ordering: .relaxed) }

    /// The server's current SETTINGS_MAX_CONCURRENT_STREAMS.
    public var maxConcurrentStreams: Int { core.stats.maxConcurrentStreams.load(ordering: .relaxed) }

    /// Streams a new request could open right now without waiting: 0 when going away or closed.
    public var availableStreams: Int {
        guard isUsable else { return 0 }
        return max(0, maxConcurrentStreams - openStreams - queuedRequests)
    }

    /// Time since the last frame (any type) arrived from the server; nil before the first one. A
    /// connection with streams open that hears nothing for long is suspect: send a PING.
    public var timeSinceLastFrame: Duration? {
        let at = core.stats.lastFrameAt.load(ordering: .relaxed)
        guard at > 0 else { return nil }
        let now = monotonicNanos()
        return .nanoseconds(Int64(now > at ? now - at : 0))
    }

    /// False once GOAWAY was received or sent, or the connection closed.
    public var isUsable: Bool { core.stats.usable.load(ordering: .relaxed) }

    /// Closes at once, without GOAWAY and without waiting for open streams: for a connection found
    /// dead (an unanswered PING). Open streams fail with `.connectionClosed` (APNs may have processed
    /// them), queued requests with `.goingAway` (never sent). Returns after the close was queued.
    public func abort(reason: String) {
        let core = self.core
        core.loop.execute { core.abort(HTTP2Error(.connectionClosed, reason)) }
    }

    /// Closes gracefully: fails queued requests with `.goingAway`, sends GOAWAY(NO_ERROR), lets open
    /// streams finish, then closes. Returns when closed.
    public func close() async {
        let core = self.core
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if !core.loop.execute({ core.close(continuation) }) { continuation.resume() }
        }
    }
}
