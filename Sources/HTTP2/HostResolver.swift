import Foundation

/// The project's one host-name resolver, for every outgoing connection: `getaddrinfo` afresh each time
/// (no cache; docs/apns-protocol.md §6: "Do an uncached DNS lookup before each connection"), on a
/// short-lived thread of its own (it blocks, so never on the cooperative pool).
public enum HostResolver {
    /// The numeric addresses of `host` (IPv4 and IPv6, in resolver order, duplicates removed), e.g.
    /// `["17.188.143.34", "2620:149:208:43a::c"]`.
    /// - Throws: `HTTP2Error` `.connectFailed` with the resolver's message, or when no address is found.
    public static func numericAddresses(host: String, port: Int) async throws(HTTP2Error) -> [String] {
        let resolved: [SocketOps.Address]
        do {
            // Always on a thread of its own, even for `localhost` (getaddrinfo reads /etc/hosts).
            resolved = try await SocketOps.resolveOnThread(host: host, port: port)
        } catch let error as HTTP2Error {
            throw error
        } catch {
            throw HTTP2Error(.connectFailed, "cannot resolve \(host): \(error)")
        }
        var addresses: [String] = []
        for var address in resolved {
            var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            let rc = withUnsafePointer(to: &address.storage) { storage in
                storage.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                    getnameinfo(pointer, address.length, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST)
                }
            }
            guard rc == 0 else { continue }
            let text = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            if !addresses.contains(text) { addresses.append(text) }
        }
        guard !addresses.isEmpty else { throw HTTP2Error(.connectFailed, "no address for \(host)") }
        return addresses
    }
}
