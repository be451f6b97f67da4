import Foundation
import Synchronization

/// A TCP proxy on 127.0.0.1 for liveness tests: forwards every connection to a target port and can,
/// for the connections open at that moment, freeze one direction (bytes stop moving, the sockets stay
/// open: a peer that died without a FIN) or reset them (RST to both sides).
///
/// Blocking sockets on threads of their own (never on the cooperative pool): one accept thread, one
/// thread per proxied connection polling both sockets.
final class TCPProxy: @unchecked Sendable {  // the mutable state is in `lock`-guarded `pairs` and atomics
    enum Direction: Sendable { case clientToServer, serverToClient }

    final class Pair: @unchecked Sendable {  // fds are written once before the thread starts; flags are atomic
        let client: Int32
        let server: Int32
        let frozenUp = Atomic<Bool>(false)
        let frozenDown = Atomic<Bool>(false)
        let closed = Atomic<Bool>(false)
        init(client: Int32, server: Int32) {
            self.client = client
            self.server = server
        }
    }

    let port: Int
    private let listener: Int32
    private let target: Int
    private let pairs = Mutex<[Pair]>([])
    private let stopped = Atomic<Bool>(false)
    /// Connections accepted so far.
    let accepted = Atomic<Int>(0)

    init(targetPort: Int) throws {
        target = targetPort
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 64) == 0 else { throw ProxyError("bind/listen: \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "tcp-proxy-accept"
        thread.start()
    }

    /// Stops forwarding `direction` on every connection open now; later connections are not affected.
    func freeze(_ direction: Direction) {
        for pair in pairs.withLock({ $0 }) where !pair.closed.load(ordering: .relaxed) {
            if direction == .clientToServer {
                pair.frozenUp.store(true, ordering: .relaxed)
            } else {
                pair.frozenDown.store(true, ordering: .relaxed)
            }
        }
    }

    /// Resets every connection open now (SO_LINGER 0, then close: RST to both peers).
    func resetAll() {
        for pair in pairs.withLock({ $0 }) where !pair.closed.exchange(true, ordering: .relaxed) {
            var linger = Foundation.linger(l_onoff: 1, l_linger: 0)
            setsockopt(pair.client, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Foundation.linger>.size))
            setsockopt(pair.server, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Foundation.linger>.size))
            shutdown(pair.client, Int32(SHUT_RDWR))
            shutdown(pair.server, Int32(SHUT_RDWR))
        }
    }

    /// Connections open now.
    var openConnections: Int { pairs.withLock { $0.filter { !$0.closed.load(ordering: .relaxed) }.count } }

    /// Stops accepting and closes everything.
    func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for pair in pairs.withLock({ $0 }) where !pair.closed.exchange(true, ordering: .relaxed) {
            shutdown(pair.client, Int32(SHUT_RDWR))
            shutdown(pair.server, Int32(SHUT_RDWR))
        }
    }

    private func acceptLoop() {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = UInt16(target).bigEndian
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(client)
                close(server)
                continue
            }
            let pair = Pair(client: client, server: server)
            pairs.withLock { $0.append(pair) }
            accepted.add(1, ordering: .relaxed)
            let thread = Thread { Self.pump(pair) }
            thread.name = "tcp-proxy-pump"
            thread.start()
        }
    }

    private static func pump(_ pair: Pair) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        defer {
            pair.closed.store(true, ordering: .relaxed)
            close(pair.client)
            close(pair.server)
        }
        while !pair.closed.load(ordering: .relaxed) {
            let up = !pair.frozenUp.load(ordering: .relaxed)
            let down = !pair.frozenDown.load(ordering: .relaxed)
            var fds = [
                pollfd(fd: up ? pair.client : -1, events: Int16(POLLIN), revents: 0),
                pollfd(fd: down ? pair.server : -1, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, 20)
            if ready < 0 {
                if errno == EINTR { continue }
                return
            }
            if ready == 0 { continue }
            for (index, (from, to)) in [(pair.client, pair.server), (pair.server, pair.client)].enumerated()
            where fds[index].revents != 0 {
                // Re-check: a freeze between poll and read must hold this direction's bytes.
                if index == 0 ? pair.frozenUp.load(ordering: .relaxed) : pair.frozenDown.load(ordering: .relaxed) { continue }
                let count = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
                if count <= 0 { return }
                var offset = 0
                while offset < count {
                    let written = buffer.withUnsafeBytes { send(to, $0.baseAddress! + offset, count - offset, Int32(MSG_NOSIGNAL)) }
                    if written <= 0 { return }
                    offset += written
                }
            }
        }
    }
}

struct ProxyError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
