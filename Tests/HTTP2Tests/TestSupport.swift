import Foundation
import ServiceCore
import Testing

/// Result of running an outside tool.
struct ToolResult: Sendable {
    var status: Int32
    var stdout: String
    var stderr: String
}

enum TestError: Error, CustomStringConvertible {
    case toolMissing(String)
    case failed(String)
    var description: String {
        switch self {
        case .toolMissing(let tool): "required tool not installed: \(tool)"
        case .failed(let message): message
        }
    }
}

enum Tools {
    /// The absolute path of `name` on PATH (or /usr/sbin), failing clearly when missing.
    static func path(_ name: String) throws -> String {
        let dirs = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/bin", "/sbin"]
        for dir in dirs where FileManager.default.isExecutableFile(atPath: "\(dir)/\(name)") {
            return "\(dir)/\(name)"
        }
        throw TestError.toolMissing(name)
    }

    /// Runs a tool to completion (off the cooperative pool), capturing its output.
    static func run(_ name: String, _ arguments: [String], timeout: Duration = .seconds(60)) async throws -> ToolResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try path(name))
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Blocking pipe reads and waitUntilExit run on threads of their own, never on the 2-thread pool.
        let errReader = PipeReader(err)
        let (o, e): (Data, Data) = await withCheckedContinuation { continuation in
            let thread = Thread {
                let outData = out.fileHandleForReading.readDataToEndOfFile()
                let errData = errReader.wait()
                process.waitUntilExit()
                continuation.resume(returning: (outData, errData))
            }
            thread.start()
            let seconds = Double(timeout.components.seconds)
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
                if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            }
        }
        return ToolResult(status: process.terminationStatus, stdout: String(decoding: o, as: UTF8.self), stderr: String(decoding: e, as: UTF8.self))
    }

    /// Runs a tool and requires exit status 0.
    @discardableResult
    static func check(_ name: String, _ arguments: [String], timeout: Duration = .seconds(60)) async throws -> ToolResult {
        let result = try await run(name, arguments, timeout: timeout)
        guard result.status == 0 else {
            throw TestError.failed("\(name) \(arguments.joined(separator: " ")) exited \(result.status): \(result.stderr.suffix(2000)) \(result.stdout.suffix(2000))")
        }
        return result
    }
}

/// Reads a pipe to its end on a thread of its own.
final class PipeReader: @unchecked Sendable {  // `data` is guarded by `condition`
    private let condition = NSCondition()
    private var data: Data?

    init(_ pipe: Pipe) {
        let thread = Thread { [self] in
            let bytes = pipe.fileHandleForReading.readDataToEndOfFile()
            condition.lock()
            data = bytes
            condition.signal()
            condition.unlock()
        }
        thread.start()
    }

    func wait() -> Data {
        condition.lock()
        defer { condition.unlock() }
        while data == nil { condition.wait() }
        return data!
    }
}

/// A long-running peer process (nghttpd), terminated by `stop()`.
final class PeerProcess: @unchecked Sendable {  // Process is used only through its thread-safe run/terminate
    let process: Process
    let port: Int

    init(_ name: String, _ arguments: [String], port: Int) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: try Tools.path(name))
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        self.port = port
        try process.run()
    }

    /// Waits until `port` accepts TCP connections.
    func waitUntilListening() async throws {
        for _ in 0..<200 {
            if canConnect(port: port) { return }
            try await Task.sleep(for: .milliseconds(25))
        }
        throw TestError.failed("peer never listened on \(port)")
    }

    /// Sends SIGKILL: the child inherits the spawning thread's blocked-signal mask, in which SIGTERM
    /// is blocked. No waiting: `waitUntilExit` would occupy a thread of the cooperative pool.
    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    deinit { stop() }
}

func canConnect(port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}

/// A free loopback TCP port (bound to 0, read back, released).
func freePort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Certificates generated with the openssl CLI in a fresh temporary directory.
struct TestCertificates: Sendable {
    let directory: String
    /// Self-signed server certificate for localhost / 127.0.0.1 (also its own CA file).
    var serverCert: String { "\(directory)/server.crt" }
    var serverKey: String { "\(directory)/server.key" }
    /// An unrelated self-signed certificate (a wrong CA).
    var otherCert: String { "\(directory)/other.crt" }
    /// CA that signs client certificates, and a client certificate with an APNs-like subject.
    var clientCA: String { "\(directory)/client-ca.crt" }
    var clientCert: String { "\(directory)/client.crt" }
    var clientKey: String { "\(directory)/client.key" }
    static let clientSubject = "/UID=com.example.app/CN=Apple Push Services: com.example.app/O=Example Inc/C=US"

    static func make() async throws -> TestCertificates {
        let directory = NSTemporaryDirectory() + "http2-test-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let certs = TestCertificates(directory: directory)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2"]
        try await Tools.check("openssl", ["req", "-x509"] + ec + ["-keyout", certs.serverKey, "-out", certs.serverCert,
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        try await Tools.check("openssl", ["req", "-x509"] + ec + ["-keyout", "\(directory)/other.key", "-out", certs.otherCert,
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        try await Tools.check("openssl", ["req", "-x509"] + ec + ["-keyout", "\(directory)/client-ca.key", "-out", certs.clientCA,
            "-subj", "/CN=Test Client CA"])
        try await Tools.check("openssl", ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", certs.clientKey, "-out", "\(directory)/client.csr", "-subj", clientSubject])
        try await Tools.check("openssl", ["x509", "-req", "-in", "\(directory)/client.csr", "-CA", certs.clientCA,
            "-CAkey", "\(directory)/client-ca.key", "-CAcreateserial", "-out", certs.clientCert, "-days", "2"])
        return certs
    }
}

/// Bytes 0, 1, … 250, 0, 1, … of `count` length: a body whose corruption is detectable.
func patternBody(_ count: Int) -> [UInt8] {
    (0..<count).map { UInt8($0 % 251) }
}
