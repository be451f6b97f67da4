import Foundation
import GRPC
import HTTP2
import PushTestSupport
import ServiceCore
import Synchronization
import Testing

/// Our gRPC server against Python `grpcio` (stubs generated at test time) and `nghttp`.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct GRPCServerTests {
    let directory: String
    let serverCert: String
    let serverKey: String
    let cancelledSleeps = Counter()
    let startedSleeps = Counter()

    static let repoRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    init() async throws {
        ProcessSignals.ignoreSIGPIPE()
        directory = NSTemporaryDirectory() + "grpc-test-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        serverCert = directory + "/server.crt"
        serverKey = directory + "/server.key"
        try await Tool.check("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                                         "-keyout", serverKey, "-out", serverCert, "-subj", "/CN=localhost",
                                         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        try await Tool.check("python3", ["-m", "grpc_tools.protoc", "-I", "\(Self.repoRoot)/Tests/GRPCTests/Protos",
                                         "--python_out=\(directory)", "--grpc_python_out=\(directory)", "echo.proto"])
    }

    func router() -> GRPCRouter {
        var router = GRPCRouter()
        router.register(service: "echo.v1.Echo", method: "Echo") { request, _ in request }  // same fields as EchoResponse
        router.register(service: "echo.v1.Echo", method: "Fail") { request, _ in
            let fields = MiniProto.fields(request)
            throw GRPCStatus(.init(rawValue: Int(fields[1]?.varint ?? 2)), fields[2]?.string ?? "")
        }
        let cancelled = cancelledSleeps
        let started = startedSleeps
        router.register(service: "echo.v1.Echo", method: "Sleep") { request, _ in
            let ms = MiniProto.fields(request)[1]?.varint ?? 0
            started.increment()
            do {
                try await Task.sleep(for: .milliseconds(Int64(ms)))
            } catch {
                cancelled.increment()
                throw error
            }
            return []
        }
        router.fallback = { request in
            HTTP2ServerResponse(status: 200, headers: [HTTP2Header("content-type", "application/json")], body: Array("{\"path\":\"\(request.path)\"}".utf8))
        }
        return router
    }

    /// Starts a server for `router()`, runs its calls (`serve()`) beside `body`, and closes it.
    func serving(_ configuration: GRPCServer.Configuration = .init(), _ body: (GRPCServer) async throws -> Void) async throws {
        let server = try GRPCServer.start(configuration: configuration, router: router())
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await server.serve() }
            defer { server.close() }
            try await body(server)
        }
    }

    @Test(arguments: [false, true])
    func grpcioClientScenarios(tls: Bool) async throws {
        let http2 = HTTP2Server.Configuration(tls: tls ? HTTP2ServerTLS(certificateChainFile: serverCert, privateKeyFile: serverKey) : nil)
        try await serving(.init(http2: http2)) { server in try await grpcioClientScenarios(server, tls: tls) }
    }

    func grpcioClientScenarios(_ server: GRPCServer, tls: Bool) async throws {
        var arguments = ["\(Self.repoRoot)/Tests/GRPCTests/Python/echo_client.py", directory]
        arguments += tls ? ["localhost:\(server.port)", serverCert] : ["127.0.0.1:\(server.port)"]
        let output = try await Tool.check("python3", arguments, timeout: .seconds(50))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: [String: Any]], "\(output.stdout)")

        #expect(json["ok"]?["message"] as? String == "héllo wörld")
        #expect(json["ok"]?["payload"] as? String == "0001ff")
        #expect(json["error"]?["code"] as? String == "FAILED_PRECONDITION")
        #expect(json["error"]?["details"] as? String == "precondition failed: 100% wrong, naïve\nsecond line")
        #expect(json["permission"]?["code"] as? String == "PERMISSION_DENIED")
        #expect(json["unimplemented"]?["code"] as? String == "UNIMPLEMENTED")
        #expect(json["deadline"]?["code"] as? String == "DEADLINE_EXCEEDED")
        #expect((json["deadline"]?["seconds"] as? Double ?? 99) < 2)
        #expect(cancelledSleeps.value == 1, "the server cancelled the handler at the deadline")
        #expect(json["large"]?["equal"] as? Bool == true)
        #expect(json["large"]?["size"] as? Int == 3 * 1024 * 1024)
        #expect(json["too_large"]?["code"] as? String == "RESOURCE_EXHAUSTED")
        #expect(json["concurrent"]?["ok"] as? Int == 300)
    }

    /// Raw HTTP/2 with nghttp (no client-side deadline): the server itself enforces grpc-timeout, and
    /// answers with a trailers-only response.
    @Test func serverEnforcesGrpcTimeoutAndRefusesCompression() async throws {
        try await serving { server in try await serverEnforcesGrpcTimeoutAndRefusesCompression(server) }
    }

    func serverEnforcesGrpcTimeoutAndRefusesCompression(_ server: GRPCServer) async throws {
        let sleepBody = directory + "/sleep.bin"
        try Data(GRPCWire.frame([0x08, 0xB8, 0x17])).write(to: URL(fileURLWithPath: sleepBody))  // milliseconds = 3000
        let grpcHeaders = ["-H", ":method: POST", "-H", "content-type: application/grpc", "-H", "te: trailers"]
        let start = ContinuousClock.now
        let slow = try await Tool.check("nghttp", ["-v"] + grpcHeaders + ["-H", "grpc-timeout: 200m", "-d", sleepBody, "http://127.0.0.1:\(server.port)/echo.v1.Echo/Sleep"])
        #expect(ContinuousClock.now - start < .seconds(2))
        #expect(slow.stdout.contains("grpc-status: 4"))
        #expect(slow.stdout.contains("grpc-message: deadline of"))
        #expect(slow.stdout.range(of: #"recv HEADERS frame <length=\d+, flags=0x05"#, options: .regularExpression) != nil, "trailers-only: one HEADERS with END_STREAM")
        #expect(!slow.stdout.contains("recv DATA frame"))

        var compressed = GRPCWire.frame([0x0A, 0x01, 0x61])
        compressed[0] = 1
        let compressedBody = directory + "/compressed.bin"
        try Data(compressed).write(to: URL(fileURLWithPath: compressedBody))
        let refused = try await Tool.check("nghttp", ["-v"] + grpcHeaders + ["-d", compressedBody, "http://127.0.0.1:\(server.port)/echo.v1.Echo/Echo"])
        #expect(refused.stdout.contains("grpc-status: 13"))
        let gzip = try await Tool.check("nghttp", ["-v"] + grpcHeaders + ["-H", "grpc-encoding: gzip", "-d", compressedBody, "http://127.0.0.1:\(server.port)/echo.v1.Echo/Echo"])
        #expect(gzip.stdout.contains("grpc-status: 12"))
        #expect(gzip.stdout.contains("grpc-accept-encoding: identity"))
    }

    @Test func nonGRPCRequestsReachTheFallback() async throws {
        try await serving { server in
            let result = try await Tool.check("curl", ["-sS", "--http2-prior-knowledge", "-H", "content-type: application/json", "-d", "{}",
                                                      "http://127.0.0.1:\(server.port)/v1/registrations"])
            #expect(result.stdout == "{\"path\":\"/v1/registrations\"}")
        }
    }

    /// A call is a child task of `serve()`: `close()` cancels the calls still running and ends
    /// `serve()` once they ended, long before the handler's own 30-s sleep would have.
    @Test func closeCancelsTheCallsServeRunsAndEndsIt() async throws {
        let server = try GRPCServer.start(configuration: .init(), router: router())
        defer { server.close() }
        let sleepBody = directory + "/sleep-long.bin"
        try Data(GRPCWire.frame([0x08, 0xB0, 0xEA, 0x01])).write(to: URL(fileURLWithPath: sleepBody))  // milliseconds = 30000
        let grpcHeaders = ["-H", ":method: POST", "-H", "content-type: application/grpc", "-H", "te: trailers"]
        let served = OneShot()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await server.serve()
                served.fire()
            }
            group.addTask {
                _ = try? await Tool.check("nghttp", grpcHeaders + ["-d", sleepBody, "http://127.0.0.1:\(server.port)/echo.v1.Echo/Sleep"], timeout: .seconds(40))
            }
            try await eventually("the handler to start its sleep") { startedSleeps.value == 1 }
            #expect(!served.isFired, "serve() runs until the server ends")
            let start = ContinuousClock.now
            server.close()
            try await eventually("serve() to return", timeout: .seconds(10)) { served.isFired }
            #expect(ContinuousClock.now - start < .seconds(10))
            #expect(cancelledSleeps.value == 1, "close() cancelled the running handler")
            group.cancelAll()
        }
    }

    /// Graceful shutdown is not cancellation: a call in progress when `shutdown` begins runs to its
    /// end and is answered OK, and `serve()` returns after it.
    @Test func shutdownLetsTheCallInProgressFinishThenEndsServe() async throws {
        let server = try GRPCServer.start(configuration: .init(), router: router())
        defer { server.close() }
        let sleepBody = directory + "/sleep-short.bin"
        try Data(GRPCWire.frame([0x08, 0xF4, 0x03])).write(to: URL(fileURLWithPath: sleepBody))  // milliseconds = 500
        let grpcHeaders = ["-H", ":method: POST", "-H", "content-type: application/grpc", "-H", "te: trailers"]
        let served = OneShot()
        let answer = try await withThrowingTaskGroup(of: String?.self) { group in
            group.addTask {
                await server.serve()
                served.fire()
                return nil
            }
            group.addTask {
                try await Tool.check("nghttp", ["-v"] + grpcHeaders + ["-d", sleepBody, "http://127.0.0.1:\(server.port)/echo.v1.Echo/Sleep"]).stdout
            }
            try await eventually("the handler to start its sleep") { startedSleeps.value == 1 }
            await server.shutdown(gracePeriod: .seconds(10))
            try await eventually("serve() to return") { served.isFired }
            var answer: String?
            for try await output in group where output != nil { answer = output }
            return answer
        }
        #expect(cancelledSleeps.value == 0, "the call was not cancelled")
        #expect(answer?.contains("grpc-status: 0") == true, "\(answer ?? "no answer")")
    }

    @Test func wireHelpers() throws {
        #expect(GRPCWire.parseTimeout("100m") == .milliseconds(100))
        #expect(GRPCWire.parseTimeout("2H") == .seconds(7200))
        #expect(GRPCWire.parseTimeout("3M") == .seconds(180))
        #expect(GRPCWire.parseTimeout("5S") == .seconds(5))
        #expect(GRPCWire.parseTimeout("7u") == .microseconds(7))
        #expect(GRPCWire.parseTimeout("9n") == .nanoseconds(9))
        #expect(GRPCWire.parseTimeout("123456789S") == nil)
        #expect(GRPCWire.parseTimeout("1x") == nil && GRPCWire.parseTimeout("S") == nil)
        #expect(GRPCWire.percentEncode("a%b\né") == "a%25b%0A%C3%A9")
        #expect(GRPCWire.percentDecode("a%25b%0A%C3%A9") == "a%b\né")
        #expect(GRPCStatus.Code.deadlineExceeded.name == "DEADLINE_EXCEEDED" && GRPCStatus.Code.unauthenticated.rawValue == 16)
        #expect(throws: GRPCStatus(.internal, "truncated message")) { try GRPCWire.unframeSingle([0, 0, 0, 0, 9, 1], maxSize: 100) }
    }
}

final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    func increment() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Just enough protobuf decoding for the test handlers (varint and length-delimited fields).
enum MiniProto {
    struct Field {
        var varint: UInt64?
        var bytes: [UInt8]?
        var string: String? { bytes.map { String(decoding: $0, as: UTF8.self) } }
    }

    static func fields(_ data: [UInt8]) -> [Int: Field] {
        var result: [Int: Field] = [:]
        var i = 0
        func varint() -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while i < data.count {
                let byte = data[i]
                i += 1
                value |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 { break }
                shift += 7
            }
            return value
        }
        while i < data.count {
            let key = varint()
            switch key & 7 {
            case 0: result[Int(key >> 3)] = Field(varint: varint())
            case 2:
                let length = Int(varint())
                result[Int(key >> 3)] = Field(bytes: Array(data[i..<min(data.count, i + length)]))
                i += length
            default: return result
            }
        }
        return result
    }
}

/// Runs outside tools for these tests (blocking reads on threads of their own, not the pool).
enum Tool {
    @discardableResult
    static func check(_ name: String, _ arguments: [String], timeout: Duration = .seconds(30)) async throws -> (stdout: String, stderr: String) {
        let dirs = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/bin"]
        guard let path = dirs.map({ "\($0)/\(name)" }).first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw GRPCStatus(.failedPrecondition, "required tool not installed: \(name)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let (o, e, status): (Data, Data, Int32) = await withCheckedContinuation { continuation in
            let errData = Mutex<Data?>(nil)
            let errThread = Thread { let d = err.fileHandleForReading.readDataToEndOfFile(); errData.withLock { $0 = d } }
            errThread.start()
            Thread {
                let outData = out.fileHandleForReading.readDataToEndOfFile()
                while errData.withLock({ $0 == nil }) { usleep(1000) }
                process.waitUntilExit()
                continuation.resume(returning: (outData, errData.withLock { $0! }, process.terminationStatus))
            }.start()
            DispatchQueue.global().asyncAfter(deadline: .now() + Double(timeout.components.seconds)) {
                if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            }
        }
        let stdout = String(decoding: o, as: UTF8.self)
        let stderr = String(decoding: e, as: UTF8.self)
        guard status == 0 else {
            throw GRPCStatus(.unknown, "\(name) \(arguments.joined(separator: " ")) exited \(status): \(stderr.suffix(3000)) \(stdout.suffix(1000))")
        }
        return (stdout, stderr)
    }
}
