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
        /// Local SETTINGS sent to every new connection. Default `HTTP2Settings.server` (100 streams,
        /// 64 KiB stream window, 1 MiB connection window); SETTINGS_MAX_HEADER_LIST_SIZE announced is the
        /// smaller of `maxHeaderListSize` and `limits.maxHeaderListBytes`.
        public var settings = HTTP2Settings.server
        /// What any peer can make the server hold: header lists, bodies, connections, time
        /// (docs/http2-server-limits.md).
        public var limits = HTTP2ServerLimits()
        /// The answer to a request that passed a per-request limit (header list, body size, body
        /// progress). Default `HTTP2ServerLimitBreach.defaultResponse` (431, 413, 408 with a text body);
        /// `GRPCServer` answers gRPC calls with a gRPC status. Runs on the connection's thread.
        public var limitResponse: @Sendable (HTTP2ServerLimitBreach, HTTP2ServerRequest) -> HTTP2ServerResponse = HTTP2ServerLimitBreach.defaultResponse
        /// Where limit breaches are logged (at most one line per limit every 10 seconds).
        public var logger = Logger(label: "http2.server")
        /// Where `push_http2_server_limit_breaches_total{limit}` and `push_http2_server_connections`
        /// are counted. Default `MetricsRegistry.shared`.
        public var metrics = MetricsRegistry.shared
        /// Number of event-loop threads. Default: the number of active processors.
        public var eventLoopCount: Int = ProcessInfo.processInfo.activeProcessorCount
        /// listen(2) backlog. Default 1024.
        public var backlog: Int32 = 1024

        /// Creates a configuration.
        public init(host: String = "127.0.0.1", port: Int = 0, tls: HTTP2ServerTLS? = nil, settings: HTTP2Settings = .server) {
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
    ///   when a TLS file cannot be loaded or a limit is out of range (`HTTP2ServerLimits.validate`).
    public static func start(configuration: Configuration, handler: @escaping Handler) throws(HTTP2Error) -> HTTP2Server {
        ProcessSignals.ignoreSIGPIPE()
        try configuration.limits.validate(settings: configuration.settings)
        SocketOps.raiseFileLimit(toAtLeast: configuration.limits.maxConnections + 256)
        let tls = try configuration.tls.map { options throws(HTTP2Error) in try TLSContext.server(options) }
        let shared = ServerShared(configuration: configuration, handler: handler, tls: tls)
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

    /// Connections held, those still in their TLS handshake and those closing included (at most
    /// `limits.maxConnections` plus the ones being closed to make room).
    public var connectionCount: Int { shared.connectionCount }

    /// How often each limit was reached since the server started (docs/http2-server-limits.md).
    public func limitBreaches() -> [HTTP2ServerLimit: Int] { shared.accounting.breaches }

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
                let code = errno
                if code == EINTR || code == ECONNABORTED { continue }
                if code == EMFILE || code == ENFILE || code == ENOBUFS || code == ENOMEM { pauseAccepting(code) }
                return  // EAGAIN: the next readiness
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
            let remote = SocketOps.describe(address)
            let core = ServerCore(id: id, loop: target, transport: transport, shared: shared, remoteAddress: remote)
            switch shared.admit(core) {
            case .admitted:
                break
            case .evicting(let victim):
                shared.accounting.breach(.maxConnections, "\(shared.limits.maxConnections) connections: closing the longest idle (\(victim.remoteAddress))", remote: remote)
                victim.loop.execute { victim.terminate() }
            case .refused:
                shared.accounting.breach(.maxConnections, "\(shared.limits.maxConnections) connections, none idle: new connection refused", remote: remote)
                transport.closeNow()
                continue
            }
            if target.inLoop { core.start() } else { target.execute { core.start() } }
        }
    }

    /// accept(2) ran out of descriptors or memory: the pending connection stays in the backlog and
    /// the level-triggered readiness would wake this loop at once; stop watching for 100 ms.
    private func pauseAccepting(_ code: Int32) {
        guard let loop else { return }
        shared.accounting.breach(.fileDescriptors, "accept: \(errnoString(code)); pausing accepts for 100 ms", remote: "-")
        loop.deregister(fd: fd)
        loop.schedule(after: .milliseconds(100)) { [self] in
            guard !closed else { return }
            _ = loop.register(fd: fd, handler: self, writable: false)
        }
    }
}
