import Foundation
import HTTP2
import ServiceCore
import Synchronization
import Testing

/// Records what handlers saw, for assertions.
final class Recorder: Sendable {
    let requests = Mutex<[HTTP2ServerRequest]>([])
    func add(_ request: HTTP2ServerRequest) { requests.withLock { $0.append(request) } }
    var all: [HTTP2ServerRequest] { requests.withLock { $0 } }
}

/// Our server against `curl --http2`, `nghttp` and `h2load`; our client against our server for the
/// controls the APNs simulator needs (GOAWAY, drop, SETTINGS, never answering).
@Suite(.serialized, .timeLimit(.minutes(1)))
struct HTTP2ServerTests {
    let certs: TestCertificates

    init() async throws {
        ProcessSignals.ignoreSIGPIPE()
        certs = try await TestCertificates.make()
    }

    func tlsOptions(clientCA: Bool = false) -> HTTP2ServerTLS {
        HTTP2ServerTLS(certificateChainFile: certs.serverCert, privateKeyFile: certs.serverKey, clientCAFile: clientCA ? certs.clientCA : nil)
    }

    /// A handler that echoes the request as text: method, path, body size, then the body.
    static let echo: HTTP2Server.Handler = { request, responder in
        let summary = "\(request.method) \(request.path) \(request.body.count)\n"
        responder.respond(status: 200, headers: [HTTP2Header("content-type", "text/plain")], body: Array(summary.utf8) + request.body)
    }

    @Test(arguments: [true, false])
    func curlGetAndPost(tls: Bool) async throws {
        let server = try HTTP2Server.start(configuration: .init(tls: tls ? tlsOptions() : nil), handler: Self.echo)
        defer { server.close() }
        let scheme = tls ? "https" : "http"
        let mode = tls ? ["--http2", "--cacert", certs.serverCert] : ["--http2-prior-knowledge"]
        let get = try await Tools.check("curl", ["-sS", "-w", "|%{http_version}|%{http_code}"] + mode + ["\(scheme)://localhost:\(server.port)/hello?x=1"])
        #expect(get.stdout == "GET /hello?x=1 0\n|2|200")
        let body = String(repeating: "abcdefghij", count: 10_000)  // 100 KB: beyond the 64 KiB default window
        let bodyFile = certs.directory + "/body.txt"
        try body.write(toFile: bodyFile, atomically: true, encoding: .utf8)
        let post = try await Tools.check("curl", ["-sS", "-w", "|%{http_version}", "--data-binary", "@\(bodyFile)"] + mode + ["\(scheme)://127.0.0.1:\(server.port)/upload"])
        #expect(post.stdout == "POST /upload 100000\n\(body)|2")
    }

    /// A body over `maxRequestBodyBytes` is answered 413 while it arrives and never buffered whole
    /// or handed to the handler; the connection keeps serving.
    @Test func oversizedBodyIsRefusedWith413() async throws {
        let seen = Recorder()
        var configuration = HTTP2Server.Configuration()
        configuration.limits.maxRequestBodyBytes = 10_000
        let server = try HTTP2Server.start(configuration: configuration) { request, responder in
            seen.add(request)
            responder.respond(status: 200)
        }
        defer { server.close() }
        let bodyFile = certs.directory + "/big-\(UUID().uuidString).bin"
        try Data(count: 3_000_000).write(to: URL(fileURLWithPath: bodyFile))
        let big = try await Tools.run("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge",
                                               "--data-binary", "@\(bodyFile)", "http://127.0.0.1:\(server.port)/upload"])
        #expect(big.stdout.hasPrefix("413"), "curl: \(big.stdout) \(big.stderr)")
        let small = try await Tools.check("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge",
                                                   "--data-binary", "exactly-small", "http://127.0.0.1:\(server.port)/upload"])
        #expect(small.stdout == "200")
        #expect(seen.all.map(\.body.count) == [13])
    }

    @Test func nghttpSeesTrailersAndDuplicateHeadersArePreserved() async throws {
        let recorder = Recorder()
        let server = try HTTP2Server.start(configuration: .init(tls: tlsOptions())) { request, responder in
            recorder.add(request)
            responder.respond(status: 200, headers: [HTTP2Header("x-a", "1"), HTTP2Header("x-a", "2")], body: Array("payload".utf8),
                              trailers: [HTTP2Header("grpc-status", "0"), HTTP2Header("x-trailer", "end of stream")])
        }
        defer { server.close() }
        let result = try await Tools.check("nghttp", ["-v", "-H", "x-dup: one", "-H", "x-other: a", "-H", "x-dup: two", "-H", "X-Dup: three",
                                                     "https://127.0.0.1:\(server.port)/trailers"])
        // nghttp prints the trailer fields of the final HEADERS frame (with END_STREAM).
        #expect(result.stdout.contains("x-trailer: end of stream"))
        #expect(result.stdout.contains("grpc-status: 0"))
        #expect(result.stdout.contains("payload"))
        #expect(result.stdout.range(of: #"recv HEADERS frame <length=\d+, flags=0x05"#, options: .regularExpression) != nil, "trailers carry END_STREAM|END_HEADERS")
        let request = try #require(recorder.all.first)
        let custom = request.headers.filter { $0.name.hasPrefix("x-") }
        #expect(custom == [HTTP2Header("x-dup", "one"), HTTP2Header("x-other", "a"), HTTP2Header("x-dup", "two"), HTTP2Header("x-dup", "three")])
        #expect(request.headers.all("x-dup") == ["one", "two", "three"])
        #expect(request.path == "/trailers" && request.method == "GET" && request.authority == "127.0.0.1:\(server.port)")
        #expect(request.connection.alpnProtocol == "h2")
    }

    @Test func goAwaySeenByNghttp() async throws {
        let recorder = Recorder()
        let server = try HTTP2Server.start(configuration: .init(tls: tlsOptions())) { request, responder in
            recorder.add(request)
            request.connection.sendGoAway(lastStreamID: request.streamID, errorCode: .noError, debugData: Array("{\"reason\":\"Shutdown\"}".utf8))
            responder.respond(status: 200, body: Array("bye".utf8))
        }
        defer { server.close() }
        let result = try await Tools.run("nghttp", ["-v", "https://127.0.0.1:\(server.port)/"])
        #expect(result.stdout.contains("recv GOAWAY frame"))
        let streamID = try #require(recorder.all.first?.streamID)
        #expect(result.stdout.contains("last_stream_id=\(streamID), error_code=NO_ERROR(0x00), opaque_data(21)=[{\"reason\":\"Shutdown\"}]"))
    }

    @Test func clientCertificateSubjectReachesTheHandler() async throws {
        let recorder = Recorder()
        let server = try HTTP2Server.start(configuration: .init(tls: tlsOptions(clientCA: true))) { request, responder in
            recorder.add(request)
            responder.respond(status: request.connection.peerCertificate == nil ? 403 : 200)
        }
        defer { server.close() }
        let with = try await Tools.check("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--http2", "--cacert", certs.serverCert,
                                                 "--cert", certs.clientCert, "--key", certs.clientKey, "https://localhost:\(server.port)/"])
        #expect(with.stdout == "200")
        let certificate = try #require(recorder.all.first?.connection.peerCertificate)
        #expect(certificate.subjectComponent("UID") == "com.example.app")
        #expect(certificate.subjectComponent("CN") == "Apple Push Services: com.example.app")
        #expect(certificate.subject == "C=US,O=Example Inc,CN=Apple Push Services: com.example.app,UID=com.example.app")
        #expect(certificate.issuer == "CN=Test Client CA")
        let without = try await Tools.check("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--http2", "--cacert", certs.serverCert,
                                                    "https://localhost:\(server.port)/"])
        #expect(without.stdout == "403")
        // A certificate from a CA the server does not trust fails the handshake.
        let wrong = try await Tools.run("curl", ["-sS", "--http2", "--cacert", certs.serverCert, "--cert", certs.serverCert, "--key", certs.serverKey,
                                                "https://localhost:\(server.port)/"])
        #expect(wrong.status != 0)
    }

    @Test func h2loadCompletesWithoutErrors() async throws {
        let server = try HTTP2Server.start(configuration: .init(tls: tlsOptions())) { request, responder in
            responder.respond(status: 200, headers: [HTTP2Header("apns-id", "6f1b7c3e-1a2b-4c5d-8e9f-0a1b2c3d4e5f")])
        }
        defer { server.close() }
        let bodyFile = certs.directory + "/h2load-body.json"
        try Data(repeating: 0x61, count: 1024).write(to: URL(fileURLWithPath: bodyFile))
        let result = try await Tools.check("h2load", ["-n", "20000", "-c", "4", "-m", "50", "-d", bodyFile, "https://127.0.0.1:\(server.port)/3/device/abc"], timeout: .seconds(50))
        #expect(result.stdout.contains("requests: 20000 total, 20000 started, 20000 done, 20000 succeeded, 0 failed, 0 errored, 0 timeout"), "\(result.stdout)")
        #expect(result.stdout.contains("status codes: 20000 2xx"))
    }

    @Test func asynchronousResponderFromATask() async throws {
        let server = try HTTP2Server.start(configuration: .init()) { request, responder in
            Task {
                try? await Task.sleep(for: .milliseconds(50))
                responder.respond(status: 202, body: Array("later".utf8))
            }
        }
        defer { server.close() }
        let result = try await Tools.check("curl", ["-sS", "-w", "|%{http_code}", "--http2-prior-knowledge", "http://127.0.0.1:\(server.port)/"])
        #expect(result.stdout == "later|202")
    }

    // MARK: Our client against our server: the controls the APNs simulator and pool rely on.

    @Test func goAwayFailsStreamsAboveLastStreamIDAsRetryable() async throws {
        let held = Mutex<[HTTP2Responder]>([])
        let server = try HTTP2Server.start(configuration: .init(tls: tlsOptions())) { request, responder in
            let count = held.withLock { list -> Int in
                list.append(responder)
                return list.count
            }
            if count == 3 {
                request.connection.sendGoAway(lastStreamID: 1, errorCode: .noError, debugData: Array("drain".utf8))
                held.withLock { $0[0].respond(status: 200) }
            }
        }
        defer { server.close() }
        let connection = try await HTTP2Connection.connect(host: "127.0.0.1", port: server.port, configuration: .init(tls: .init(caFile: certs.serverCert)))
        var events = connection.events.makeAsyncIterator()
        let results = await withTaskGroup(of: Result<HTTP2Response, HTTP2Error>.self) { group in
            for i in 0..<3 {
                group.addTask {
                    try? await Task.sleep(for: .milliseconds(20 * i))  // streams 1, 3, 5 in order
                    do { return .success(try await connection.send(HTTP2Request(path: "/\(i)"), timeout: .seconds(5))) } catch { return .failure(error as! HTTP2Error) }
                }
            }
            var all: [Result<HTTP2Response, HTTP2Error>] = []
            for await result in group { all.append(result) }
            return all
        }
        let successes = results.compactMap { try? $0.get() }
        #expect(successes.map(\.streamID) == [1])
        let failures = results.compactMap { result -> HTTP2Error? in if case .failure(let error) = result { error } else { nil } }
        #expect(failures.count == 2)
        #expect(failures.allSatisfy { $0.code == .streamRefused && $0.isRetryable && $0.wasNotProcessed })
        #expect(!connection.isUsable && connection.availableStreams == 0)
        await #expect(throws: HTTP2Error.self) { _ = try await connection.send(HTTP2Request(path: "/late")) }
        var sawGoAway = false
        while let event = await events.next() {
            if case .goAwayReceived(let last, let code, let debug) = event {
                #expect(last == 1 && code == .noError && debug == Array("drain".utf8))
                sawGoAway = true
            }
            if case .closed = event { break }
        }
        #expect(sawGoAway)
    }

    @Test func neverAnsweredRequestTimesOutAndConnectionStaysUsable() async throws {
        let server = try HTTP2Server.start(configuration: .init()) { request, responder in
            if request.path != "/never" { responder.respond(status: 200) }
        }
        defer { server.close() }
        let connection = try await HTTP2Connection.connect(host: "127.0.0.1", port: server.port)
        let error = await #expect(throws: HTTP2Error.self) {
            _ = try await connection.send(HTTP2Request(path: "/never"), timeout: .milliseconds(200))
        }
        #expect(error?.code == .timeout)
        #expect(try await connection.send(HTTP2Request(path: "/ok")).status == 200)
        // The stream count drops when nghttp2 closes the stream, which may come a moment after the
        // response was handed over: wait for it, but not forever.
        for _ in 0..<100 where connection.openStreams != 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(connection.openStreams == 0, "the timed-out stream was reset with CANCEL and closed")
        await connection.close()
    }

    @Test func maxConcurrentStreamsChangedAtRuntime() async throws {
        let server = try HTTP2Server.start(configuration: .init(settings: { var s = HTTP2Settings(); s.maxConcurrentStreams = 7; return s }())) { request, responder in
            if request.path == "/lower" { request.connection.setMaxConcurrentStreams(2) }
            responder.respond(status: 200)
        }
        defer { server.close() }
        let connection = try await HTTP2Connection.connect(host: "127.0.0.1", port: server.port)
        #expect(connection.maxConcurrentStreams == 7)
        _ = try await connection.send(HTTP2Request(path: "/lower"))
        for await event in connection.events {
            if case .settingsChanged(let max, _) = event, max == 2 { break }
        }
        #expect(connection.maxConcurrentStreams == 2)
        #expect(server.connections().count == 1)
        await connection.close()
    }

    @Test func droppedConnectionFailsInFlightRequests() async throws {
        let server = try HTTP2Server.start(configuration: .init()) { request, responder in
            request.connection.drop()
        }
        defer { server.close() }
        let connection = try await HTTP2Connection.connect(host: "127.0.0.1", port: server.port)
        let error = await #expect(throws: HTTP2Error.self) {
            _ = try await connection.send(HTTP2Request(path: "/"), timeout: .seconds(5))
        }
        #expect(error?.code == .connectionClosed)
        #expect(error?.isRetryable == true && error?.wasNotProcessed == false)
    }
}
