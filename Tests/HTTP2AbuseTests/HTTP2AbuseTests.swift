import Foundation
import Kafka
import PushTestSupport
import ServiceCore
import Testing

/// The registration-service executable (TLS, limits from `PUSH_HTTP2_*`) attacked as a peer without
/// credentials would attack it, by Python/abuse.py (raw frames and the `h2` library): each attack
/// must leave the server's RSS within 50 MB of where it started, be answered or closed by the limit
/// or timeout meant for it (docs/http2-server-limits.md), and leave normal gRPC calls on new
/// connections fast. Each test runs a fresh server process, so RSS is that process's alone.
///
/// Normal calls must take under 100 ms (median of five) or, on a machine too loaded for that, no
/// more than twice the median of five unloaded calls measured just before the attack.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct HTTP2AbuseTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let binary = root.appendingPathComponent(".build/debug/registration-service")
    static let script = root.appendingPathComponent("Tests/HTTP2AbuseTests/Python/abuse.py")

    init() { ProcessSignals.ignoreSIGPIPE() }

    @Test func headerListBombThroughTheHPACKDynamicTable() async throws {
        let result = try await attack("header_bomb", size: 40)
        let streams = try #require(result["streams"] as? Int)
        #expect(result["answered"] as? Int == streams, "\(result)")
        #expect(result["answers"] as? [String: Int] == ["200 grpc-status 8": streams], "RESOURCE_EXHAUSTED for every stream: \(result)")
        #expect(result["announced_max_header_list_size"] as? Int == 16_384)
    }

    @Test func unfinishedBodiesOnManyStreams() async throws {
        let connections = 20
        let result = try await attack("unfinished_bodies", size: connections)
        #expect(result["answered"] as? Int == connections * 100, "\(result)")
        #expect(result["answers"] as? [String: Int] == ["200 grpc-status 4": connections * 100], "DEADLINE_EXCEEDED for every stream: \(result)")
        // 2,000 streams tried to send 1 MiB each; flow control let through about a connection window each.
        let sent = try #require(result["body_bytes_sent"] as? Int)
        #expect(sent < connections * (2 << 20), "bytes the server let the peer send: \(sent)")
    }

    @Test func thousandsOfIdleConnections() async throws {
        let result = try await attack(
            "idle_connections", size: 2_000, wait: 60,
            environment: ["PUSH_HTTP2_MAX_CONNECTIONS": "400", "PUSH_HTTP2_IDLE_TIMEOUT_MS": "8000"])
        let connections = try #require(result["connections"] as? Int)
        #expect(connections == 2_000)
        // Each was closed by the server: evicted at the limit or after the idle timeout, with GOAWAY NO_ERROR.
        #expect(result["closed_by_server"] as? Int == connections, "\(result)")
        #expect(result["goaway_no_error"] as? Int == connections, "\(result)")
        #expect(try #require(result["peak_fds"] as? Int) < 400 + 100, "descriptors held: \(result)")
    }

    @Test func slowBodies() async throws {
        let result = try await attack("slow_bodies", size: 10, wait: 30)
        #expect(result["answered"] as? Int == 1_000, "\(result)")
        #expect(result["answers"] as? [String: Int] == ["200 grpc-status 4": 1_000], "\(result)")
        // One byte a second is no progress: answered at the 2 s body timeout, not held.
        let last = try #require(result["last_answer_seconds"] as? Double)
        #expect(last < 15, "\(result)")
        #expect(try #require(result["first_answer_seconds"] as? Double) >= 1.9, "\(result)")
    }

    @Test func handshakesThatNeverComplete() async throws {
        let result = try await attack("stalled_handshakes", size: 500, wait: 30, environment: ["PUSH_HTTP2_MAX_CONNECTIONS": "2000"])
        #expect(result["closed_by_server"] as? Int == 500, "\(result)")
        // Closed by the 2 s handshake timeout, not before.
        #expect(try #require(result["first_closed_seconds"] as? Double) >= 1.9, "\(result)")
        #expect(try #require(result["last_closed_seconds"] as? Double) < 15, "\(result)")
    }

    // MARK: Harness

    /// Starts a registration-service with short timeouts, runs one scenario against it, checks what
    /// every scenario shares (RSS, normal calls) and returns the scenario's result.
    func attack(_ scenario: String, size: Int, wait: Double = 20, environment: [String: String] = [:]) async throws -> [String: Any] {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build first: \(Self.binary.path) is missing")
        let server = try await RegistrationServiceProcess.start(environment: [
            "PUSH_HTTP2_HANDSHAKE_TIMEOUT_MS": "2000", "PUSH_HTTP2_REQUEST_BODY_TIMEOUT_MS": "2000",
        ].merging(environment) { $1 })
        defer { server.stop() }
        let (status, output) = try await runProgram(
            ["python3", Self.script.path, scenario, "--port", String(server.port), "--pid", String(server.pid), "--ca", server.certificate,
             "--size", String(size), "--wait", String(wait)],
            environment: ["PYTHONDONTWRITEBYTECODE": "1"])
        let line = output.split(separator: "\n").last { $0.hasPrefix("RESULT ") }
        let json = try #require(line.map { Data($0.dropFirst("RESULT ".count).utf8) }, "abuse.py \(scenario) exited \(status):\n\(output.suffix(3000))")
        let result = try #require(try JSONSerialization.jsonObject(with: json) as? [String: Any])
        let growth = try #require(result["rss_growth_mb"] as? Double)
        let calls = try #require(result["normal_call_ms"] as? [Double])
        let unloaded = try #require(result["warm_up_ms"] as? [Double])
        print("ABUSE \(scenario): RSS \(result["rss_baseline_mb"] ?? "?") MB → peak \(result["rss_peak_mb"] ?? "?") MB (+\(growth) MB); "
              + "normal calls \(calls) ms (unloaded \(unloaded) ms); \(result.filter { !$0.key.hasPrefix("rss") && !$0.key.hasPrefix("normal") && !$0.key.hasPrefix("warm") })")
        #expect(growth < 50, "RSS growth \(growth) MB")
        #expect(result["normal_call_ok"] as? Bool == true, "normal calls during the attack: \(result["normal_call_status"] ?? "")")
        let ceiling = max(100, 2 * median(unloaded))
        #expect(median(calls) < ceiling, "normal calls \(calls) ms during the attack; unloaded \(unloaded) ms")
        let log = server.log()
        #expect(!log.contains("level=critical"), "server log:\n\(log.suffix(2000))")
        return result
    }

    func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? .infinity : sorted[sorted.count / 2]
    }
}

/// A registration-service child process over TLS, with a Kafka-protocol broker in this process.
final class RegistrationServiceProcess: @unchecked Sendable {  // Process is used only through run/kill
    let process: Process
    let port: Int
    let certificate: String
    let logFile: URL
    private let cluster: KafkaMockCluster

    var pid: Int32 { process.processIdentifier }

    private init(process: Process, port: Int, certificate: String, logFile: URL, cluster: KafkaMockCluster) {
        self.process = process
        self.port = port
        self.certificate = certificate
        self.logFile = logFile
        self.cluster = cluster
    }

    static func start(environment: [String: String]) async throws -> RegistrationServiceProcess {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("http2-abuse-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let certificate = directory.appendingPathComponent("server.crt").path
        let key = directory.appendingPathComponent("server.key").path
        let (status, output) = try await runProgram([
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-keyout", key, "-out", certificate, "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ])
        guard status == 0 else { throw TestFailure("openssl: \(output)") }
        let cluster = try KafkaMockCluster(brokers: 1)
        // Clients never create topics: the service answers UNAVAILABLE while its topic is missing.
        try cluster.createTopic("push.token-events.v1", partitions: 1)
        let logFile = directory.appendingPathComponent("server.log")
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        let handle = try FileHandle(forWritingTo: logFile)
        let process = Process()
        process.executableURL = HTTP2AbuseTests.binary
        process.environment = ProcessInfo.processInfo.environment.merging([
            "PUSH_KAFKA_BOOTSTRAP": cluster.bootstrapServers, "PUSH_GRPC_HOST": "127.0.0.1", "PUSH_GRPC_PORT": "0",
            "PUSH_GRPC_TLS_CERT_FILE": certificate, "PUSH_GRPC_TLS_KEY_FILE": key, "LOG_LEVEL": "info",
            // The attacks are on the HTTP/2 layer, before any credential is read; the normal call is an
            // unauthenticated RegisterToken. The admin port is the kernel's pick (the stack may hold 9101).
            "PUSH_AUTH_DISABLED": "true", "PUSH_ADMIN_PORT": "0",
        ].merging(environment) { $1 }) { $1 }
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        try? handle.close()
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let text = (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first(where: { $0.contains("registration-service ready") }),
               let field = line.split(separator: " ").first(where: { $0.hasPrefix("port=") }), let port = Int(field.dropFirst(5)) {
                return RegistrationServiceProcess(process: process, port: port, certificate: certificate, logFile: logFile, cluster: cluster)
            }
            guard process.isRunning else { throw TestFailure("registration-service exited:\n\(text)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        kill(process.processIdentifier, SIGKILL)
        throw TestFailure("registration-service never became ready")
    }

    func log() -> String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    /// SIGKILL: the child may inherit a blocked SIGTERM from the spawning thread; its state is disposable.
    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
