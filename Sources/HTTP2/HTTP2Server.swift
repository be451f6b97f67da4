import Foundation
import ServiceCore

/// An HTTP/2 server over TLS (ALPN `h2`) or cleartext with prior knowledge (h2c), on nghttp2.
///
/// Connections are spread round-robin over `Configuration.eventLoopCount` threads; each thread owns its
/// connections (epoll, non-blocking sockets, OpenSSL on the socket, nghttp2 driven with mem_recv /
/// mem_send). The handler runs on the connection's thread for each complete request.
///
/// ```swift
/// let server = try HTTP2Server.start(configuration: .init(port: 0)) { request, responder in
///     responder.respond(status: 200, body: Array("hello".utf8))
/// }
/// print(server.port)
/// await server.shutdown()
/// ```
public final class HTTP2Server: Sendable {
    /// Called once per complete request on the connection's thread. It must not block: answer at once
    /// through the responder (fast path, no thread hop), or hand the responder to a task and answer later.
    public typealias Handler = @Sendable (HTTP2ServerRequest, HTTP2Responder) -> Void

    /// Server configuration.
    public struct Configuration: Sendable {
        /// Address to bind. Default `127.0.0.1`.
        public var host: String = "127.0.0.1"
        /// TCP port; 0 lets the kernel pick one (read it back from `HTTP2Server.port`). Default 0.
        public var port: Int = 0
        /// TLS options; nil serves cleartext HTTP/2 with prior knowledge (h2c). Default nil.
        public var tls: HTTP2ServerTLS?
        /// Local SETTINGS sent to every new connection.
        public var settings = HTTP2Settings()
        /// Number of event-loop threads. Default: the number of active processors.
        public var eventLoopCount: Int = ProcessInfo.processInfo.activeProcessorCount
        /// listen(2) backlog. Default 1024.
        public var backlog: Int32 = 1024
        /// Largest request body accepted, in bytes; a larger one is answered 413 as soon as it
        /// passes the limit, and what arrived is dropped. Default 16 MiB.
        public var maxRequestBodyBytes: Int = 16 << 20

        /// Creates a configuration.
        public init(host: String = "127.0.0.1", port: Int = 0, tls: HTTP2ServerTLS? = nil, settings: HTTP2Settings = HTTP2Settings()) {
            self.host = host
            self.port = port
            self.tls = tls
            self.settings = settings
        }
    }

    /// The bound TCP port.
    public let port: Int
    private let group: EventLoopGroup
    private let listener: Listener
    private let shared: ServerShared

    private init(port: Int, group: EventLoopGroup, listener: Listener, shared: ServerShared) {
        self.port = port
        self.group = group
        self.listener = listener
        self.shared = shared
    }

    /// Binds, listens and starts serving.
    /// - Throws: `HTTP2Error` `.bindFailed` when the address cannot be bound, `.invalidConfiguration`
    ///   when a TLS file cannot be loaded.
    public static func start(configuration: Configuration, handler: @escaping Handler) throws(HTTP2Error) -> HTTP2Server {
        ProcessSignals.ignoreSIGPIPE()
        let tls = try configuration.tls.map { options throws(HTTP2Error) in try TLSContext.server(options) }
        let shared = ServerShared(
            settings: configuration.settings, handler: handler, tls: tls, maxRequestBodyBytes: configuration.maxRequestBodyBytes)
        let (fd, port) = try SocketOps.listen(host: configuration.host, port: configuration.port, backlog: configuration.backlog)
        let group: EventLoopGroup
        do {
            group = try EventLoopGroup(count: configuration.eventLoopCount, name: "http2-server")
        } catch {
            Foundation.close(fd)
            throw error
        }
        let listener = Listener(fd: fd, group: group, shared: shared)
        let acceptLoop = group.loops[0]
        acceptLoop.execute { listener.start(on: acceptLoop) }
        return HTTP2Server(port: port, group: group, listener: listener, shared: shared)
    }

    /// The open connections (after their TLS handshake), in no particular order.
    public func connections() -> [HTTP2ServerConnection] {
        shared.connections.withLock { Array($0.values) }
    }

    /// Stops accepting, sends GOAWAY to every connection, waits up to `gracePeriod` for their streams
    /// to finish, drops what is left and stops the threads.
    public func shutdown(gracePeriod: Duration = .seconds(5)) async {
        listener.stop()
        for connection in connections() { connection.sendGoAway() }
        let deadline = ContinuousClock.now + gracePeriod
        while !connections().isEmpty && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        close()
    }

    /// Stops accepting, drops every connection at once and stops the threads.
    public func close() {
        listener.stop()
        for connection in connections() { connection.drop() }
        group.stop()
    }
}

/// The listening socket, registered on the first loop; accepted sockets go round-robin to the loops.
/// Loop-confined after `start` (its loop's thread only), except `stop`, which hops there.
final class Listener: EventLoopHandler, @unchecked Sendable {
    private let fd: Int32
    private let group: EventLoopGroup
    private let shared: ServerShared
    private var loop: EventLoop?
    private var closed = false

    init(fd: Int32, group: EventLoopGroup, shared: ServerShared) {
        self.fd = fd
        self.group = group
        self.shared = shared
    }

    func start(on loop: EventLoop) {
        self.loop = loop
        _ = loop.register(fd: fd, handler: self, writable: false)
    }

    func stop() {
        let loop = group.loops[0]
        let work: @Sendable () -> Void = { [self] in
            guard !closed else { return }
            closed = true
            loop.deregister(fd: fd)
            Foundation.close(fd)
        }
        if loop.inLoop { work() } else { loop.execute(work) }
    }

    func flush() {}

    func handleEvent(readable: Bool, writable: Bool) {
        while !closed {
            var address = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let client = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    accept(fd, $0, &length)
                }
            }
            if client < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return  // EAGAIN, or EMFILE and friends: try again on the next readiness
            }
            SocketOps.setNonBlocking(client)
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            SocketOps.setNoDelay(client)
            let transport: Transport
            do {
                transport = try Transport(fd: client, context: shared.tls, isServer: true)
            } catch {
                continue
            }
            let id = shared.nextConnectionID.add(1, ordering: .relaxed).oldValue
            let target = group.next()
            let core = ServerCore(id: id, loop: target, transport: transport, shared: shared, remoteAddress: SocketOps.describe(address))
            if target.inLoop { core.start() } else { target.execute { core.start() } }
        }
    }
}
