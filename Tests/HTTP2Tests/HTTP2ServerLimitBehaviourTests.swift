import Foundation
import HTTP2
import ServiceCore
import Synchronization
import Testing

/// The server's limits seen from `curl` and `nghttp` in-process, with their counts in a metrics
/// registry of the test's own (the attacks themselves, with RSS, are in HTTP2AbuseTests).
@Suite(.serialized, .timeLimit(.minutes(1)))
struct HTTP2ServerLimitBehaviourTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    /// Holds a weak reference to a connection handle.
    final class WeakConnection: Sendable {
        private let reference = Mutex<[Weak]>([])
        struct Weak: @unchecked Sendable { weak var value: HTTP2ServerConnection? }  // only read under the lock
        func set(_ connection: HTTP2ServerConnection) { reference.withLock { $0 = [Weak(value: connection)] } }
        var isSet: Bool { reference.withLock { !$0.isEmpty } }
        var isAlive: Bool { reference.withLock { $0.first?.value != nil } }
    }

    func waitFor(_ what: String, timeout: Duration = .seconds(10), _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            guard ContinuousClock.now < deadline else { throw TestError.failed("timed out waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// A closed connection is freed with everything it holds (its handle and core referred to each
    /// other, so every connection and its TLS state stayed in memory for good).
    @Test func aClosedConnectionIsFreed() async throws {
        let seen = WeakConnection()
        let server = try HTTP2Server.start(configuration: .init()) { request, responder in
            seen.set(request.connection)
            responder.respond(status: 204)
        }
        defer { server.close() }
        let result = try await Tools.check("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge", "http://127.0.0.1:\(server.port)/"])
        #expect(result.stdout == "204")
        #expect(seen.isSet)
        try await waitFor("the closed connection to be freed") { !seen.isAlive }
        try await waitFor("no connection held") { server.connectionCount == 0 }
    }

    /// A header list over the limit is answered 431 without reaching the handler, counted and
    /// announced; the connection goes on serving.
    @Test func aHeaderListOverTheLimitIsAnswered431() async throws {
        let metrics = MetricsRegistry()
        let handled = Mutex(0)
        var configuration = HTTP2Server.Configuration()
        configuration.metrics = metrics
        configuration.limits.maxHeaderListBytes = 4_096
        let server = try HTTP2Server.start(configuration: configuration) { _, responder in
            handled.withLock { $0 += 1 }
            responder.respond(status: 200)
        }
        defer { server.close() }
        let url = "http://127.0.0.1:\(server.port)/"
        let big = String(repeating: "a", count: 5_000)
        let result = try await Tools.run("nghttp", ["-v", "-H", "x-big: \(big)", url, url])
        #expect(result.stdout.contains(":status: 431"), "\(result.stdout.suffix(3000))")
        #expect(result.stdout.contains("SETTINGS_MAX_HEADER_LIST_SIZE(0x06):4096"))
        #expect(handled.withLock { $0 } == 0)
        #expect(server.limitBreaches()[.headerListSize] == 1)
        #expect(metrics.value("push_http2_server_limit_breaches_total", labels: ["header_list_size"]) == 1)
        let small = try await Tools.check("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge", "-H", "x-small: 1", url])
        #expect(small.stdout == "200")
        try await waitFor("connections closed") { server.connectionCount == 0 }
        #expect(metrics.value("push_http2_server_connections") == 0)
    }

    /// The server's SETTINGS are the server defaults: 100 streams, a 64 KiB stream window, a 1 MiB
    /// connection window and a 16 KiB header list.
    @Test func serverDefaultsAreAnnounced() async throws {
        let server = try HTTP2Server.start(configuration: .init()) { _, responder in responder.respond(status: 200) }
        defer { server.close() }
        let result = try await Tools.check("nghttp", ["-v", "http://127.0.0.1:\(server.port)/"])
        for setting in ["SETTINGS_MAX_CONCURRENT_STREAMS(0x03):100", "SETTINGS_INITIAL_WINDOW_SIZE(0x04):65536",
                        "SETTINGS_MAX_HEADER_LIST_SIZE(0x06):16384"] {
            #expect(result.stdout.contains(setting), "\(setting) in \(result.stdout.prefix(2000))")
        }
        #expect(result.stdout.contains("window_size_increment=999425"), "connection window opened to 1 MiB + 16 KiB (the body limit and a frame)")
    }

    /// An idle connection gets GOAWAY NO_ERROR at the idle timeout, and is closed.
    @Test func anIdleConnectionIsClosedWithGoAway() async throws {
        var configuration = HTTP2Server.Configuration()
        configuration.limits.idleTimeout = .milliseconds(300)
        let server = try HTTP2Server.start(configuration: configuration) { _, responder in responder.respond(status: 200) }
        defer { server.close() }
        let start = ContinuousClock.now
        let connection = try await HTTP2Connection.connect(host: "127.0.0.1", port: server.port)
        var goAway: HTTP2ErrorCode?
        var closed = false
        for await event in connection.events {
            switch event {
            case .goAwayReceived(_, let errorCode, _): goAway = errorCode
            case .closed: closed = true
            default: break
            }
            if closed { break }
        }
        #expect(goAway == .noError)
        #expect(closed)
        #expect(ContinuousClock.now - start >= .milliseconds(300))
        #expect(server.limitBreaches()[.idleTimeout] == 1)
        try await waitFor("no connection held") { server.connectionCount == 0 }
    }
}
