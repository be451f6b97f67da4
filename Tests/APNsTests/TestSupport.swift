import Foundation
import Testing

/// Runs outside tools (openssl, python3) for the tests, off the cooperative pool: the process is
/// awaited through its termination handler, and output goes to files so a full pipe never blocks it.
enum Tool {
    struct Output {
        let status: Int32
        let stdout: [UInt8]
        let stderr: String
        var text: String { String(decoding: stdout, as: UTF8.self) }
    }

    /// Runs `executable` (looked up on PATH) with `arguments`, feeding `stdin`.
    /// Records an issue and throws when the tool is missing.
    static func run(_ executable: String, _ arguments: [String], stdin: [UInt8] = [], in directory: TemporaryDirectory) async throws -> Output {
        guard let path = which(executable) else {
            Issue.record("required tool \(executable) is not installed (not on PATH)")
            throw ToolMissing(name: executable)
        }
        let id = UUID().uuidString
        let inURL = directory.url.appendingPathComponent("\(id).in")
        let outURL = directory.url.appendingPathComponent("\(id).out")
        let errURL = directory.url.appendingPathComponent("\(id).err")
        try Data(stdin).write(to: inURL)
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.currentDirectoryURL = directory.url
        process.standardInput = try FileHandle(forReadingFrom: inURL)
        process.standardOutput = try FileHandle(forWritingTo: outURL)
        process.standardError = try FileHandle(forWritingTo: errURL)
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do { try process.run() } catch {
                process.terminationHandler = nil
                continuation.resume(throwing: error)
            }
        }
        return Output(
            status: status, stdout: Array(try Data(contentsOf: outURL)),
            stderr: String(decoding: try Data(contentsOf: errURL), as: UTF8.self))
    }

    /// Runs and requires exit status 0.
    static func check(_ executable: String, _ arguments: [String], stdin: [UInt8] = [], in directory: TemporaryDirectory) async throws -> Output {
        let output = try await run(executable, arguments, stdin: stdin, in: directory)
        if output.status != 0 {
            Issue.record("\(executable) \(arguments.joined(separator: " ")) exited \(output.status): \(output.stderr) \(output.text)")
            throw ToolFailed()
        }
        return output
    }

    static func which(_ name: String) -> String? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    struct ToolMissing: Error { let name: String }
    struct ToolFailed: Error {}

    /// `Tests/APNsTests/Python/<name>`.
    static func pythonScript(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/\(name)").path
    }
}

/// A fresh directory under the system temp directory, removed on deinit.
final class TemporaryDirectory: @unchecked Sendable {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("apns-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    func read(_ name: String) throws -> String { String(decoding: try Data(contentsOf: url.appendingPathComponent(name)), as: UTF8.self) }

    func readBytes(_ name: String) throws -> [UInt8] { Array(try Data(contentsOf: url.appendingPathComponent(name))) }

    func write(_ name: String, _ text: String) throws { try Data(text.utf8).write(to: url.appendingPathComponent(name)) }

    /// Makes an Apple-style `.p8` (PKCS#8, EC P-256) with `openssl genpkey` and returns its text.
    func makeP8(_ name: String = "key.p8") async throws -> String {
        _ = try await Tool.check("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name], in: self)
        return try read(name)
    }
}
