import Foundation
import HTTP2
import ServiceCore
import Synchronization
import Testing

/// Our client against `nghttpd` (nghttp2's own server), over TLS and h2c.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct HTTP2ClientTests {
    let certs: TestCertificates
    let docroot: String

    init() async throws {
        ProcessSignals.ignoreSIGPIPE()
        certs = try await TestCertificates.make()
        docroot = certs.directory + "/docroot"
        try FileManager.default.createDirectory(atPath: docroot, withIntermediateDirectories: true)
        for size in [0, 1, 1_000, 70_000, 300_000] {
            try Data(patternBody(size)).write(to: URL(fileURLWithPath: "\(docroot)/\(size).bin"))
        }
    }

    func startNghttpd(tls: Bool, extra: [String] = []) async throws -> PeerProcess {
        let port = freePort()
        var arguments = ["--echo-upload", "-d", docroot, "-a", "127.0.0.1"] + extra
        arguments += tls ? [String(port), certs.serverKey, certs.serverCert] : ["--no-tls", String(port)]
        let peer = try PeerProcess("nghttpd", arguments, port: port)
        try await peer.waitUntilListening()
        return peer
    }

    func connect(_ peer: PeerProcess, tls: Bool, caFile: String? = nil, host: String = "127.0.0.1", serverName: String? = nil) async throws -> HTTP2Connection {
        let options = tls ? HTTP2ClientTLS(caFile: caFile ?? certs.serverCert, serverName: serverName) : nil
        return try await HTTP2Connection.connect(host: host, port: peer.port, configuration: .init(tls: options))
    }

    @Test(arguments: [true, false])
    func getAndPostBodiesOfSeveralSizes(tls: Bool) async throws {
        let peer = try await startNghttpd(tls: tls, extra: ["--trailer=x-checksum: done"])
        defer { peer.stop() }
        let connection = try await connect(peer, tls: tls)
        for size in [0, 1, 1_000, 70_000, 300_000] {
            let response = try await connection.send(HTTP2Request(path: "/\(size).bin"), timeout: .seconds(10))
            #expect(response.status == 200)
            if size > 0 { #expect(response.trailers == [HTTP2Header("x-checksum", "done")]) }
            #expect(response.body == patternBody(size), "GET \(size) bytes")
            #expect(response.headers.first("content-length") == String(size))
        }
        for size in [1, 1_000, 70_000, 300_000] {
            let body = patternBody(size).reversed().map { $0 }
            let response = try await connection.send(HTTP2Request(method: "POST", path: "/0.bin", headers: [HTTP2Header("content-type", "application/octet-stream")], body: body), timeout: .seconds(10))
            #expect(response.status == 200)
            #expect(response.body == body, "POST echo of \(size) bytes")
        }
        let missing = try await connection.send(HTTP2Request(path: "/missing"))
        #expect(missing.status == 404)
        await connection.close()
        #expect(!connection.isUsable)
    }

    @Test func manyConcurrentStreams() async throws {
        let peer = try await startNghttpd(tls: true)
        defer { peer.stop() }
        let connection = try await connect(peer, tls: true)
        let results = try await withThrowingTaskGroup(of: Bool.self) { group in
            for i in 0..<500 {
                group.addTask {
                    let body = Array("request \(i)".utf8)
                    let response = try await connection.send(HTTP2Request(method: "POST", path: "/0.bin", body: body), timeout: .seconds(20))
                    return response.status == 200 && response.body == body
                }
            }
            var ok = 0
            for try await result in group where result { ok += 1 }
            return ok
        }
        #expect(results == 500)
        await connection.close()
    }

    @Test func serverMaxConcurrentStreamsIsRespected() async throws {
        let peer = try await startNghttpd(tls: true, extra: ["--max-concurrent-streams=3"])
        defer { peer.stop() }
        let connection = try await connect(peer, tls: true)
        #expect(connection.maxConcurrentStreams == 3)
        let maxOpen = Atomic<Int>(0)
        let maxQueued = Atomic<Int>(0)
        let sampler = Task {
            while !Task.isCancelled {
                maxOpen.max(connection.openStreams)
                maxQueued.max(connection.queuedRequests)
                try? await Task.sleep(for: .microseconds(200))
            }
        }
        // 300 KB responses keep streams open long enough to overlap.
        let ok = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<60 {
                group.addTask { try await connection.send(HTTP2Request(path: "/300000.bin"), timeout: .seconds(20)).body.count == 300_000 }
            }
            var ok = 0
            for try await result in group where result { ok += 1 }
            return ok
        }
        sampler.cancel()
        #expect(ok == 60)
        // nghttpd closes the connection with PROTOCOL_ERROR when a client exceeds its limit.
        #expect(connection.isUsable)
        #expect(maxOpen.load(ordering: .relaxed) <= 3)
        #expect(maxQueued.load(ordering: .relaxed) > 0, "requests beyond the limit wait in our own queue")
        await connection.close()
    }

    @Test func wrongCAFailsVerification() async throws {
        let peer = try await startNghttpd(tls: true)
        defer { peer.stop() }
        let error = await #expect(throws: HTTP2Error.self) {
            _ = try await connect(peer, tls: true, caFile: certs.otherCert)
        }
        #expect(error?.code == .certificateVerificationFailed)
    }

    @Test func wrongHostFailsVerification() async throws {
        let peer = try await startNghttpd(tls: true)
        defer { peer.stop() }
        let error = await #expect(throws: HTTP2Error.self) {
            _ = try await connect(peer, tls: true, serverName: "wrong.example.com")
        }
        #expect(error?.code == .certificateVerificationFailed)
        // The same server and CA with the right name connects (the failure above is the name check).
        let good = try await connect(peer, tls: true, host: "localhost")
        #expect(try await good.send(HTTP2Request(path: "/1.bin")).status == 200)
        await good.close()
    }

    @Test func pingMeasuresRoundTrip() async throws {
        let peer = try await startNghttpd(tls: false)
        defer { peer.stop() }
        let connection = try await connect(peer, tls: false)
        let rtt = try await connection.ping()
        #expect(rtt > .zero && rtt < .seconds(1))
        await connection.close()
    }
}

extension Atomic where Value == Int {
    func max(_ value: Int) {
        var current = load(ordering: .relaxed)
        while value > current {
            let (exchanged, original) = compareExchange(expected: current, desired: value, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }
}
