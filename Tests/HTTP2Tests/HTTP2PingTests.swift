import Foundation
import HTTP2
import ServiceCore
import Testing

/// PING on a connection that has been idle (no timer of its own pending) returns when the ACK
/// arrives, against nghttp2's own server. A pool retires connections whose PING is not answered in
/// time, so a PING that waits for anything but the ACK retires healthy connections.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct HTTP2PingTests {
    @Test(arguments: [true, false])
    func pingOnAnIdleConnectionReturnsOnTheACK(tls: Bool) async throws {
        ProcessSignals.ignoreSIGPIPE()
        let certs = try await TestCertificates.make()
        let port = freePort()
        var arguments = ["-a", "127.0.0.1"]
        arguments += tls ? [String(port), certs.serverKey, certs.serverCert] : ["--no-tls", String(port)]
        let peer = try PeerProcess("nghttpd", arguments, port: port)
        try await peer.waitUntilListening()
        defer { peer.stop() }
        let connection = try await HTTP2Connection.connect(
            host: "127.0.0.1", port: port, configuration: .init(tls: tls ? HTTP2ClientTLS(caFile: certs.serverCert) : nil))
        // A request with a short timeout: its timer fires (cancelled) while the connection idles, so
        // the event loop afterwards waits with no timer at all.
        _ = try await connection.send(HTTP2Request(path: "/"), timeout: .milliseconds(300))
        let clock = ContinuousClock()
        for round in 1...3 {
            try await Task.sleep(for: .milliseconds(700))  // idle: longer than the request's timeout
            let start = clock.now
            // Bounded: a PING whose ACK is never matched must fail this test, not hang it.
            let rtt = try await withThrowingTaskGroup(of: Duration?.self) { group in
                group.addTask { try await connection.ping() }
                group.addTask { try await Task.sleep(for: .seconds(2)); return nil }
                let first = try await group.next()!
                group.cancelAll()
                return first
            }
            let elapsed = start.duration(to: clock.now)
            #expect(rtt != nil, "round \(round): no ACK matched within 2 s")
            // The round trip is measured on the connection's own thread; the caller's wake-up adds
            // scheduling delay on a loaded machine, hence the looser bound on `elapsed`.
            #expect(rtt.map { $0 < .milliseconds(100) } == true, "round \(round): round trip \(String(describing: rtt))")
            #expect(elapsed < .seconds(1), "round \(round): ping() returned after \(elapsed)")
        }
        await connection.close()
    }
}
