import Foundation
import HTTP2
import ServiceCore

/// One `GET` on a service's admin port (HTTP/1.1, libmicrohttpd: README "Admin port"), over a blocking
/// socket on a thread of its own: `Connection: close`, the whole answer read, 10 s timeouts.
enum AdminHTTPGet {
    /// - Parameters:
    ///   - base: `http://host:port`.
    ///   - path: the request path (its parts percent-encoded by the caller when needed).
    /// - Returns: the status and the body.
    /// - Throws: `PushCtlError` (`.usage`) for a bad URL, (`.unavailable`) when the port cannot be
    ///   reached or answers nothing readable.
    static func get(base: String, path: String) async throws -> (status: Int, body: String) {
        guard let url = URLComponents(string: base), url.scheme == "http", let host = url.host else {
            throw PushCtlError(.usage, "admin URL \"\(base)\" is not http://host:port")
        }
        let port = url.port ?? 80
        let address: String
        do {
            guard let first = try await HostResolver.numericAddresses(host: host, port: port).first else { throw PushCtlError(.unavailable, "\(host): no address") }
            address = first
        } catch let error as PushCtlError {
            throw error
        } catch {
            throw PushCtlError(.unavailable, "cannot resolve \(host): \(error)")
        }
        let thread = DedicatedThread(name: "pushctl-admin-get")
        defer { thread.shutdown() }
        let answer = try await thread.run { () -> (Int, String)? in Self.exchange(address: address, port: port, host: host, path: path) }
        guard let answer else { throw PushCtlError(.unavailable, "cannot reach the admin port at \(base) (GET \(path))") }
        return answer
    }

    /// The blocking exchange; nil when the connection or the answer failed.
    private static func exchange(address: String, port: Int, host: String, path: String) -> (Int, String)? {
        let family = address.contains(":") ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected: Int32
        if family == AF_INET6 {
            var socketAddress = sockaddr_in6()
            socketAddress.sin6_family = sa_family_t(AF_INET6)
            socketAddress.sin6_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET6, address, &socketAddress.sin6_addr) == 1 else { return nil }
            connected = withUnsafePointer(to: &socketAddress) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var socketAddress = sockaddr_in()
            socketAddress.sin_family = sa_family_t(AF_INET)
            socketAddress.sin_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET, address, &socketAddress.sin_addr) == 1 else { return nil }
            connected = withUnsafePointer(to: &socketAddress) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard connected == 0 else { return nil }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\n\r\n".utf8)
        var sent = 0
        while sent < request.count {
            let count = request[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { return nil }
            sent += count
        }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count < 0 { return nil }
            if count == 0 { break }
            data += buffer[0..<count]
        }
        let all = String(decoding: data, as: UTF8.self)
        guard let split = all.range(of: "\r\n\r\n"), all.hasPrefix("HTTP/1."), let status = Int(all.dropFirst(9).prefix(3)) else { return nil }
        return (status, String(all[split.upperBound...]))
    }
}
