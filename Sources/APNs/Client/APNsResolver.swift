import Foundation

/// Host name look-ups for the pool: `getaddrinfo` on a short-lived thread of its own (it blocks, so
/// never on the cooperative pool) and never cached, so each connection starts from a fresh answer
/// (docs/apns-protocol.md §6: "Do an uncached DNS lookup before each connection").
enum APNsResolver {
    /// The numeric addresses of `host` (IPv4 and IPv6, in resolver order, duplicates removed).
    /// - Throws: `ResolveError` with the resolver's message.
    static func resolve(host: String, port: Int) async throws(ResolveError) -> [String] {
        let result: Result<[String], ResolveError> = await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: lookUp(host: host, port: port)) }
            thread.name = "apns-dns"
            thread.start()
        }
        return try result.get()
    }

    struct ResolveError: Error, CustomStringConvertible {
        let description: String
    }

    private static func lookUp(host: String, port: Int) -> Result<[String], ResolveError> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            return .failure(ResolveError(description: "cannot resolve \(host): \(String(cString: gai_strerror(rc)))"))
        }
        defer { freeaddrinfo(first) }
        var addresses: [String] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(info.pointee.ai_addr, info.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0 {
                let text = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
                if !addresses.contains(text) { addresses.append(text) }
            }
            cursor = info.pointee.ai_next
        }
        guard !addresses.isEmpty else { return .failure(ResolveError(description: "no address for \(host)")) }
        return .success(addresses)
    }
}
