import AdminHTTP
import Foundation
import ServiceCore
import Synchronization
import Testing

/// The admin port over real HTTP/1.1 on loopback (libmicrohttpd), spoken to through plain sockets.
/// Serialized: several tests block a thread on a socket, and the async routes' answers need the
/// cooperative threads those would hold.
@Suite(.serialized) struct AdminServerTests {
    static func endpoints(ready: Bool = true, hooks: [String: @Sendable ((String) -> String?) -> AdminResponse] = [:]) -> AdminEndpoints {
        AdminEndpoints(
            metrics: { "# TYPE push_x_total counter\npush_x_total 3\n" },
            liveness: { ProbeReport(checks: [.init("heartbeat test", .ok, "came round 0.0 s ago")]) },
            readiness: {
                ProbeReport(checks: [
                    .init("postgres", ready ? .ok : .failing, ready ? "last check 1.0 s ago took 1 ms" : "last check failed 1.0 s ago: refused"),
                    .init("apns", .info, "2 provider-token faults (not a readiness condition)"),
                ])
            },
            testHooks: hooks)
    }

    static func start(_ endpoints: AdminEndpoints, limit: Int = 64) throws -> AdminServer {
        var configuration = AdminServer.Configuration(port: 0)
        configuration.host = "127.0.0.1"
        configuration.connectionLimit = limit
        return try AdminServer.start(configuration: configuration, endpoints: endpoints)
    }

    @Test func metricsAreServedInPrometheusTextFormat() throws {
        let server = try Self.start(Self.endpoints())
        defer { server.stop() }
        let response = try HTTP1.request("GET", "/metrics", port: server.port)
        #expect(response.status == 200)
        #expect(response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
        #expect(response.body == "# TYPE push_x_total counter\npush_x_total 3\n")
    }

    @Test func pushReadyFollowsReadiness() throws {
        var settings = try AdminServer.Settings(environment: EnvironmentConfig(["PUSH_ADMIN_HOST": "127.0.0.1"]), defaultPort: 0)
        settings.configuration.host = "127.0.0.1"
        let readiness = ReadinessState()
        let server = try AdminServer.start(settings: settings, readiness: readiness)
        defer { server.stop() }
        func ready() throws -> String? {
            let body = try HTTP1.request("GET", "/metrics", port: server.port).body
            return body.split(separator: "\n").first { $0.hasPrefix("push_ready ") }.map(String.init)
        }
        #expect(try ready() == "push_ready 0")  // starting
        readiness.setPhase(.running)
        #expect(try HTTP1.request("GET", "/readyz", port: server.port).status == 200)
        #expect(try ready() == "push_ready 1")
        readiness.setPhase(.stopping)
        #expect(try ready() == "push_ready 0")
    }

    @Test func probesAnswer200Or503WithTheirReasons() throws {
        let ready = try Self.start(Self.endpoints(ready: true))
        defer { ready.stop() }
        let notReady = try Self.start(Self.endpoints(ready: false))
        defer { notReady.stop() }
        let good = try HTTP1.request("GET", "/readyz", port: ready.port)
        #expect(good.status == 200)
        #expect(good.body.hasPrefix("ok\nok postgres: "))
        #expect(good.body.contains("info apns: 2 provider-token faults"))
        let bad = try HTTP1.request("GET", "/readyz", port: notReady.port)
        #expect(bad.status == 503)
        #expect(bad.body.hasPrefix("failing\nfailing postgres: last check failed"))
        let live = try HTTP1.request("GET", "/healthz", port: notReady.port)
        #expect(live.status == 200)
        #expect(live.body == "ok\nok heartbeat test: came round 0.0 s ago\n")
    }

    @Test func headHasNoBodyAndUnknownPathsAndMethodsAreRefused() throws {
        let server = try Self.start(Self.endpoints())
        defer { server.stop() }
        let head = try HTTP1.request("HEAD", "/metrics", port: server.port)
        #expect(head.status == 200)
        #expect(head.body.isEmpty)
        #expect(try HTTP1.request("GET", "/nothing", port: server.port).status == 404)
        #expect(try HTTP1.request("POST", "/metrics", port: server.port).status == 405)
        // Test hooks exist only when given.
        #expect(try HTTP1.request("POST", "/debug/wedge-kafka-poll?seconds=1", port: server.port).status == 404)
    }

    @Test func testHooksReceiveTheirQueryParameters() throws {
        let seen = Mutex<String?>(nil)
        let server = try Self.start(Self.endpoints(hooks: [
            "wedge": { query in
                seen.withLock { $0 = query("seconds") }
                return AdminResponse(status: 202, body: "wedged\n")
            },
        ]))
        defer { server.stop() }
        #expect(try HTTP1.request("GET", "/debug/wedge?seconds=7", port: server.port).status == 405)
        let response = try HTTP1.request("POST", "/debug/wedge?seconds=7", port: server.port)
        #expect(response.status == 202)
        #expect(seen.withLock { $0 } == "7")
    }

    @Test func connectionsBeyondTheLimitAreRefused() throws {
        let server = try Self.start(Self.endpoints(), limit: 2)
        defer { server.stop() }
        // Two idle connections take the whole allowance; a third is closed without an answer.
        // Each descriptor is closed exactly once: a second close could hit a descriptor number the
        // process reused meanwhile (the server's own socket, when other suites run alongside).
        let first = try HTTP1.connect(port: server.port)
        let second: Int32
        do {
            second = try HTTP1.connect(port: server.port)
        } catch {
            close(first)
            throw error
        }
        var open = true
        defer {
            if open {
                close(first)
                close(second)
            }
        }
        // Wait until the server accepted both (a request on a third connection gets no answer).
        let deadline = Date().addingTimeInterval(10)
        var refused = false
        while Date() < deadline {
            if (try? HTTP1.request("GET", "/metrics", port: server.port)) == nil { refused = true; break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(refused)
        close(first)
        close(second)
        open = false
        // Once they are gone, requests are served again.
        var served = false
        let again = Date().addingTimeInterval(10)
        while Date() < again {
            if (try? HTTP1.request("GET", "/metrics", port: server.port))?.status == 200 { served = true; break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(served)
    }

    // MARK: Async routes

    /// A gate a handler waits on until the test opens it.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, entered: Int, waiters: [CheckedContinuation<Void, Never>])>((false, 0, []))
        var entered: Int { state.withLock { $0.entered } }
        func wait() async {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state in
                    state.entered += 1
                    if state.open { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        }
        func open() {
            let waiters = state.withLock { state in
                state.open = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    static func asyncEndpoints(_ gate: Gate, timeout: Duration = .seconds(10)) -> AdminEndpoints {
        var result = endpoints()
        result.asyncRoutes = [
            .init(prefix: "/v1/things/") { rest in
                await gate.wait()
                return AdminResponse(status: rest == "missing" ? 404 : 200, contentType: AdminResponse.json, body: #"{"thing":"\#(rest)"}"#)
            },
        ]
        result.asyncTimeout = timeout
        return result
    }

    /// `HTTP1.request` on a thread of its own: the blocking socket never holds a cooperative thread
    /// that the handler's task needs. The answer may take long when other suites of the process hold
    /// the cooperative threads: 60 s.
    static func requestOffPool(_ method: String, _ path: String, port: Int) async throws -> HTTP1.Response {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                do {
                    continuation.resume(returning: try HTTP1.request(method, path, port: port, timeoutSeconds: 60))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    static func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw HTTP1.Failure(what: "timed out waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    @Test func anAsyncRouteAnswersLaterWhileTheServerKeepsServing() async throws {
        let gate = Gate()
        let server = try Self.start(Self.asyncEndpoints(gate))
        defer { server.stop() }
        async let serving: Void = server.serve()
        async let waiting = Self.requestOffPool("GET", "/v1/things/a%20b", port: server.port)
        try await Self.waitUntil("the handler to start") { gate.entered == 1 }
        // The suspended request holds neither the server's thread nor its answer.
        #expect(try await Self.requestOffPool("GET", "/metrics", port: server.port).status == 200)
        #expect(try await Self.requestOffPool("GET", "/readyz", port: server.port).status == 200)
        gate.open()
        let answer = try await waiting
        #expect(answer.status == 200 && answer.headers["content-type"] == "application/json")
        #expect(answer.body == #"{"thing":"a b"}"#)
        let missing = try await Self.requestOffPool("GET", "/v1/things/missing", port: server.port)
        #expect(missing.status == 404 && missing.body == #"{"thing":"missing"}"#)
        let head = try await Self.requestOffPool("HEAD", "/v1/things/x", port: server.port)
        #expect(head.status == 200 && head.body.isEmpty)
        #expect(try await Self.requestOffPool("POST", "/v1/things/x", port: server.port).status == 405)
        // Several at once, each with its own answer.
        async let one = Self.requestOffPool("GET", "/v1/things/1", port: server.port)
        async let two = Self.requestOffPool("GET", "/v1/things/2", port: server.port)
        #expect(try await [one.body, two.body] == [#"{"thing":"1"}"#, #"{"thing":"2"}"#])
        server.stop()
        await serving  // returns once stopped
    }

    @Test func anAsyncRouteWithoutAnAnswerInTimeGets503AndStopDoesNotHang() async throws {
        let gate = Gate()
        let server = try Self.start(Self.asyncEndpoints(gate, timeout: .milliseconds(300)))
        async let serving: Void = server.serve()
        let started = ContinuousClock.now
        let late = try await Self.requestOffPool("GET", "/v1/things/slow", port: server.port)
        #expect(late.status == 503 && late.headers["content-type"] == "application/json")
        #expect(late.body == #"{"error":"unavailable","message":"no answer within 300 ms"}"# + "\n")
        #expect(ContinuousClock.now - started < .seconds(30))
        // The server still answers, and stopping with a request suspended neither hangs nor crashes.
        #expect(try await Self.requestOffPool("GET", "/metrics", port: server.port).status == 200)
        let waitingServer = try Self.start(Self.asyncEndpoints(gate))
        async let waitingServing: Void = waitingServer.serve()
        async let pending = try? Self.requestOffPool("GET", "/v1/things/stuck", port: waitingServer.port)
        try await Self.waitUntil("the handler to start") { gate.entered == 2 }
        let stopping = ContinuousClock.now
        waitingServer.stop()
        server.stop()
        #expect(ContinuousClock.now - stopping < .seconds(30))
        if let answer = await pending { #expect(answer.status == 503) }
        gate.open()  // the handlers ignore cancellation: serve() returns once they end
        await serving
        await waitingServing
    }

    /// Without `serve()` nothing answers an async route, so each handler and its deadline are children of
    /// `serve()`'s task group: cancelling the task that runs it ends the deadline children at once and
    /// the handlers once they return, and `serve()` returns.
    @Test func serveRunsTheHandlersAsItsChildren() async throws {
        let gate = Gate()
        let server = try Self.start(Self.asyncEndpoints(gate, timeout: .seconds(60)))
        defer { server.stop() }
        let serving = Task { await server.serve() }
        async let pending = try? Self.requestOffPool("GET", "/v1/things/child", port: server.port)
        try await Self.waitUntil("the handler to start") { gate.entered == 1 }
        serving.cancel()
        gate.open()
        let started = ContinuousClock.now
        await serving.value
        #expect(ContinuousClock.now - started < .seconds(30))  // not the 60 s deadline
        #expect(await pending?.status == 200)
    }

    @Test func aTakenPortIsAClearError() throws {
        let server = try Self.start(Self.endpoints())
        defer { server.stop() }
        var configuration = AdminServer.Configuration(port: server.port)
        configuration.host = "127.0.0.1"
        #expect(throws: AdminServerError.self) { try AdminServer.start(configuration: configuration, endpoints: Self.endpoints()) }
        #expect(throws: AdminServerError.self) { try AdminServer.start(configuration: .init(port: 70000), endpoints: Self.endpoints()) }
    }
}

/// A minimal HTTP/1.1 client over a blocking socket (`Connection: close`, whole response read).
enum HTTP1 {
    struct Response {
        var status: Int
        var headers: [String: String]
        var body: String
    }

    struct Failure: Error { let what: String }

    static func connect(port: Int, timeoutSeconds: Int = 5) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(what: "socket") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw Failure(what: "connect")
        }
        return fd
    }

    static func request(_ method: String, _ path: String, port: Int, timeoutSeconds: Int = 5) throws -> Response {
        let fd = try connect(port: port, timeoutSeconds: timeoutSeconds)
        defer { close(fd) }
        let text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        _ = text.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            data += buffer[0..<count]
        }
        let all = String(decoding: data, as: UTF8.self)
        guard let split = all.range(of: "\r\n\r\n") else { throw Failure(what: "no response") }
        let lines = all[..<split.lowerBound].components(separatedBy: "\r\n")
        guard let statusLine = lines.first, statusLine.hasPrefix("HTTP/1.1 "), let status = Int(statusLine.dropFirst(9).prefix(3)) else {
            throw Failure(what: "bad status line")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Response(status: status, headers: headers, body: String(all[split.upperBound...]))
    }
}
