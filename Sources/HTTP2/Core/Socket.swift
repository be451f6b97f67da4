import Foundation
import ServiceCore

/// Plain BSD-socket helpers (non-blocking, close-on-exec, TCP_NODELAY).
enum SocketOps {
    /// A resolved socket address.
    struct Address: @unchecked Sendable {  // plain bytes of a sockaddr, no pointers inside
        var storage = sockaddr_storage()
        var length: socklen_t = 0
        var family: Int32 { Int32(storage.ss_family) }
    }

    /// Resolves `host` (numeric addresses without a look-up). Blocking for names: call off the pool.
    static func resolve(host: String, port: Int) throws(HTTP2Error) -> [Address] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &result)
        guard rc == 0, let first = result else {
            throw HTTP2Error(.connectFailed, "cannot resolve \(host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(first) }
        var addresses: [Address] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            var address = Address()
            withUnsafeMutableBytes(of: &address.storage) { raw in
                raw.copyMemory(from: UnsafeRawBufferPointer(start: info.pointee.ai_addr, count: Int(info.pointee.ai_addrlen)))
            }
            address.length = info.pointee.ai_addrlen
            addresses.append(address)
            cursor = info.pointee.ai_next
        }
        return addresses
    }

    /// Resolves on a short-lived thread of its own so that a slow DNS answer never blocks the pool;
    /// an IP address or `localhost` at once.
    static func resolveAsync(host: String, port: Int) async throws -> [Address] {
        if isIPAddress(host) || host == "localhost" { return try resolve(host: host, port: port) }
        return try await resolveOnThread(host: host, port: port)
    }

    /// `resolve` on a short-lived thread of its own (`dns-resolve`): `getaddrinfo` blocks.
    static func resolveOnThread(host: String, port: Int) async throws -> [Address] {
        try await withCheckedThrowingContinuation { continuation in
            NamedThread.start(name: "dns-resolve") { continuation.resume(with: Result { try resolve(host: host, port: port) }) }
        }
    }

    static func setNonBlocking(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Starts a non-blocking connect. Returns the fd; completion is signalled by writability.
    static func startConnect(_ address: Address) throws(HTTP2Error) -> Int32 {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTP2Error(.connectFailed, "socket: \(errnoString())") }
        setNoDelay(fd)
        var storage = address.storage
        let rc = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, address.length) }
        }
        if rc != 0 && errno != EINPROGRESS {
            let message = errnoString()
            close(fd)
            throw HTTP2Error(.connectFailed, "connect: \(message)")
        }
        return fd
    }

    /// The pending error of a socket after a non-blocking connect (0 when connected).
    static func socketError(_ fd: Int32) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length)
        return value
    }

    /// Binds and listens on `host:port` (port 0: the kernel picks one). Returns the fd and the port.
    static func listen(host: String, port: Int, backlog: Int32) throws(HTTP2Error) -> (fd: Int32, port: Int) {
        let addresses = try resolve(host: host, port: port)
        guard let address = addresses.first else { throw HTTP2Error(.bindFailed, "no address for \(host)") }
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTP2Error(.bindFailed, "socket: \(errnoString())") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var storage = address.storage
        let rc = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, address.length) }
        }
        guard rc == 0 else {
            let message = errnoString()
            close(fd)
            throw HTTP2Error(.bindFailed, "bind \(host):\(port): \(message)")
        }
        guard Foundation.listen(fd, backlog) == 0 else {
            let message = errnoString()
            close(fd)
            throw HTTP2Error(.bindFailed, "listen: \(message)")
        }
        var bound = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, Int(portOf(bound)))
    }

    static func portOf(_ storage: sockaddr_storage) -> UInt16 {
        var copy = storage
        return withUnsafePointer(to: &copy) { pointer in
            if Int32(storage.ss_family) == AF_INET6 {
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
            }
            return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
        }
    }

    /// `host:port` text of a peer address.
    static func describe(_ storage: sockaddr_storage) -> String {
        var copy = storage
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let port = portOf(storage)
        return withUnsafePointer(to: &copy) { pointer -> String in
            if Int32(storage.ss_family) == AF_INET6 {
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { in6 in
                    var address = in6.pointee.sin6_addr
                    inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count))
                    return "[\(cString(buffer))]:\(port)"
                }
            }
            return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { in4 in
                var address = in4.pointee.sin_addr
                inet_ntop(AF_INET, &address, &buffer, socklen_t(buffer.count))
                return "\(cString(buffer)):\(port)"
            }
        }
    }
}

/// The NUL-terminated text in `buffer`.
func cString(_ buffer: [CChar]) -> String {
    buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}
