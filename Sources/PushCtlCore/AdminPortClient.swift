#if canImport(Glibc)
import Glibc
#endif
import Foundation
import HTTP2
import ServiceCore

/// One HTTP/1.1 `GET` to a service's admin port (README "Admin port"), for the commands that read a
/// running dispatcher (`credentials list --admin URL`, `channel list`). The host is resolved by the
/// project's `HostResolver`; the socket calls block, so they run on a thread of their own
/// (`DedicatedThread`), never on the cooperative pool. `Connection: close`, the whole answer read.
enum AdminPortClient {
    /// The largest answer read (bytes).
    static let maximumAnswer = 16 << 20

    /// `GET path` on `base` (`http://host:port`).
    /// - Parameters:
    ///   - option: the command-line option that gave `base`, named in a usage error.
    ///   - path: the request path (its parts percent-encoded by the caller when needed).
    /// - Returns: the status code and the body.
    /// - Throws: `CommandLineArguments.UsageError` naming `option` when `base` is not `http://host[:port]`;
    ///   `PushCtlError` `.unavailable` naming the address when it cannot be resolved, reached or read
    ///   within `timeoutSeconds`; `.failed` when it answers something that is not HTTP.
    static func get(_ base: String, path: String, option: String, timeoutSeconds: Int = 10) async throws -> (status: Int, body: String) {
        guard let components = URLComponents(string: base), components.scheme == "http", let host = components.host, !host.isEmpty,
              components.path.isEmpty || components.path == "/"
        else { throw CommandLineArguments.UsageError("option --\(option): \(base) is not http://host[:port]") }
        let port = components.port ?? 80
        let address = "\(host):\(port)"
        let numeric: String
        do {
            guard let first = try await HostResolver.numericAddresses(host: host, port: port).first else {
                throw PushCtlError(.unavailable, "\(address): \(host) has no address")
            }
            numeric = first
        } catch let error as PushCtlError {
            throw error
        } catch {
            throw PushCtlError(.unavailable, "\(address): cannot resolve \(host): \(error)")
        }
        let thread = DedicatedThread(name: "pushctl-admin")
        defer { thread.shutdown() }
        return try await thread.run {
            try blockingGet(numeric: numeric, port: port, address: address, path: path, timeoutSeconds: timeoutSeconds)
        }
    }

    private static func blockingGet(numeric: String, port: Int, address: String, path: String, timeoutSeconds: Int) throws
        -> (status: Int, body: String)
    {
        let family = numeric.contains(":") ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw PushCtlError(.unavailable, "\(address): socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected: Int32
        if family == AF_INET6 {
            var socketAddress = sockaddr_in6()
            socketAddress.sin6_family = sa_family_t(AF_INET6)
            socketAddress.sin6_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET6, numeric, &socketAddress.sin6_addr) == 1 else { throw PushCtlError(.unavailable, "\(address): bad address \(numeric)") }
            connected = withUnsafePointer(to: &socketAddress) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var socketAddress = sockaddr_in()
            socketAddress.sin_family = sa_family_t(AF_INET)
            socketAddress.sin_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET, numeric, &socketAddress.sin_addr) == 1 else { throw PushCtlError(.unavailable, "\(address): bad address \(numeric)") }
            connected = withUnsafePointer(to: &socketAddress) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard connected == 0 else {
            throw PushCtlError(.unavailable, "\(address): cannot connect: \(String(cString: strerror(errno)))")
        }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: \(address)\r\nAccept: application/json\r\nConnection: close\r\n\r\n".utf8)
        var sent = 0
        while sent < request.count {
            let written = request[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { throw PushCtlError(.unavailable, "\(address): write: \(String(cString: strerror(errno)))") }
            sent += written
        }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let read = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if read == 0 { break }
            guard read > 0 else { throw PushCtlError(.unavailable, "\(address): read: \(String(cString: strerror(errno)))") }
            answer += buffer[0..<read]
            guard answer.count <= maximumAnswer else { throw PushCtlError(.failed, "\(address): the answer exceeds \(maximumAnswer) bytes") }
        }
        return try parse(answer, from: address)
    }
    /// Status and body of an HTTP/1.1 answer read to its end (`Connection: close`; no chunked encoding).
    static func parse(_ answer: [UInt8], from address: String) throws -> (status: Int, body: String) {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard let end = answer.indices.first(where: { answer[$0...].starts(with: separator) }) else {
            throw PushCtlError(.failed, "\(address): not an HTTP answer")
        }
        let head = String(decoding: answer[..<end], as: UTF8.self)
        let statusLine = head.split(separator: "\r\n", maxSplits: 1).first.map(String.init) ?? ""
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw PushCtlError(.failed, "\(address): not an HTTP answer: \(statusLine)")
        }
        if head.lowercased().contains("transfer-encoding: chunked") {
            throw PushCtlError(.failed, "\(address): a chunked answer (not expected from an admin port)")
        }
        return (status, String(decoding: answer[(end + separator.count)...], as: UTF8.self))
    }
}
