import Foundation

/// Paths in the repository, found from this file's location.
enum TestPaths {
    /// `Tests/ProtobufCodecTests`.
    static let testsDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    /// The repository root.
    static let repository = testsDirectory.deletingLastPathComponent().deletingLastPathComponent()
    /// `Protos`, the include root of the push.v1 contracts.
    static let protos = repository.appendingPathComponent("Protos")
    /// The include root of the test-only protos (`codec_test.proto`, `v2/push_v2.proto`).
    static let testProtos = testsDirectory.appendingPathComponent("Protos")

    /// The push.v1 contract files, sorted.
    static func pushProtoFiles() throws -> [String] {
        let directory = protos.appendingPathComponent("push/v1")
        return try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(".proto") }.sorted()
            .map { directory.appendingPathComponent($0).path }
    }
}

/// A tool the tests need is missing or failed.
struct ToolError: Error, CustomStringConvertible, Sendable {
    let description: String
}

/// What a finished process left.
struct ProcessResult {
    let status: Int32
    let stdout: [UInt8]
    let stderr: String
    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
}

/// The full path of `name` on `PATH`.
/// - Throws: `ToolError` saying how to install it.
func findTool(_ name: String) throws -> String {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    for directory in path.split(separator: ":") {
        let candidate = "\(directory)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    throw ToolError(description: "\(name) is not on PATH; run scripts/install-deps (it installs protobuf-compiler and python3 packages)")
}

/// Runs a tool to completion with `stdin` as its input; output goes through temporary files so
/// that no pipe can fill up and block either side.
func runTool(_ name: String, _ arguments: [String], stdin: [UInt8] = []) throws -> ProcessResult {
    let executable = try findTool(name)
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("codec-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let inURL = scratch.appendingPathComponent("in")
    let outURL = scratch.appendingPathComponent("out")
    let errURL = scratch.appendingPathComponent("err")
    try Data(stdin).write(to: inURL)
    _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
    _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
    let input = try FileHandle(forReadingFrom: inURL)
    let output = try FileHandle(forWritingTo: outURL)
    let errors = try FileHandle(forWritingTo: errURL)
    defer { try? input.close(); try? output.close(); try? errors.close() }

    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.currentDirectoryURL = TestPaths.repository
    process.standardInput = input
    process.standardOutput = output
    process.standardError = errors
    try process.run()
    process.waitUntilExit()
    return ProcessResult(
        status: process.terminationStatus,
        stdout: Array(try Data(contentsOf: outURL)),
        stderr: String(decoding: try Data(contentsOf: errURL), as: UTF8.self)
    )
}

/// `protoc --encode/--decode` over every proto the tests know: the push.v1 contracts, the codec's
/// test messages (`codectest.*`) and the later contract version (`pushv2.*`).
enum Protoc {
    static func inputs() throws -> [String] {
        ["-I", TestPaths.protos.path, "-I", TestPaths.testProtos.path]
            + (try TestPaths.pushProtoFiles())
            + [TestPaths.testProtos.appendingPathComponent("codec_test.proto").path,
               TestPaths.testProtos.appendingPathComponent("v2/push_v2.proto").path]
    }

    /// protoc's text format of the binary message `bytes` of type `type`.
    static func decode(_ type: String, _ bytes: [UInt8]) throws -> String {
        let result = try runTool("protoc", ["--decode=\(type)"] + (try inputs()), stdin: bytes)
        guard result.status == 0 else {
            throw ToolError(description: "protoc --decode=\(type) failed (\(result.status)): \(result.stderr)")
        }
        return result.stdoutText
    }

    /// protoc's binary encoding of the text-format message `text`.
    static func encode(_ type: String, _ text: String) throws -> [UInt8] {
        let result = try runTool("protoc", ["--encode=\(type)"] + (try inputs()), stdin: Array(text.utf8))
        guard result.status == 0 else {
            throw ToolError(description: "protoc --encode=\(type) failed (\(result.status)): \(result.stderr)")
        }
        return result.stdout
    }

    /// `text` in protoc's own layout (encode, then decode).
    static func canonical(_ type: String, _ text: String) throws -> String {
        try decode(type, try encode(type, text))
    }
}

/// Python's protobuf runtime (`Python/oracle.py`), fed a descriptor set protoc builds once.
enum PythonOracle {
    private static let descriptorSet: Result<String, ToolError> = {
        do {
            let path = FileManager.default.temporaryDirectory
                .appendingPathComponent("codec-oracle-\(getpid()).pb").path
            let result = try runTool("protoc", ["--include_imports", "--descriptor_set_out=\(path)"] + (try Protoc.inputs()))
            guard result.status == 0 else {
                return .failure(ToolError(description: "protoc --descriptor_set_out failed: \(result.stderr)"))
            }
            return .success(path)
        } catch {
            return .failure(ToolError(description: "\(error)"))
        }
    }()

    /// Answers a batch of requests (see oracle.py) in one python3 process.
    static func run(_ requests: [[String: String]]) throws -> [[String: Any]] {
        let setPath = try descriptorSet.get()
        let script = TestPaths.testsDirectory.appendingPathComponent("Python/oracle.py").path
        let input = try JSONSerialization.data(withJSONObject: requests)
        let result = try runTool("python3", [script, setPath], stdin: Array(input))
        guard result.status == 0 else {
            throw ToolError(description: "oracle.py failed (\(result.status)): \(result.stderr)")
        }
        guard let answers = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]],
              answers.count == requests.count else {
            throw ToolError(description: "oracle.py gave an unexpected answer: \(result.stdoutText.prefix(500))")
        }
        return answers
    }

    /// `json_format.MessageToJson` of each binary message.
    static func messageToJSON(_ type: String, _ messages: [[UInt8]]) throws -> [String] {
        let answers = try run(messages.map { ["op": "to_json", "type": type, "data": Data($0).base64EncodedString()] })
        return try answers.map { answer in
            guard let json = answer["json"] as? String else { throw ToolError(description: "MessageToJson: \(answer)") }
            return json
        }
    }

    /// `json_format.Parse` of each JSON text, re-encoded as binary; a parse error is returned as
    /// `.failure` with Python's message.
    static func parseJSON(_ type: String, _ texts: [String]) throws -> [Result<[UInt8], ToolError>] {
        let answers = try run(texts.map { ["op": "from_json", "type": type, "json": $0] })
        return answers.map { answer in
            if let data = answer["data"] as? String, let bytes = Data(base64Encoded: data) {
                return .success(Array(bytes))
            }
            return .failure(ToolError(description: "\(answer["error"] ?? answer)"))
        }
    }

    /// Whether Python's parser accepts each binary message.
    static func parses(_ type: String, _ messages: [[UInt8]]) throws -> [Bool] {
        let answers = try run(messages.map { ["op": "parse", "type": type, "data": Data($0).base64EncodedString()] })
        return answers.map { $0["ok"] as? Bool == true }
    }
}

/// `bytes` as lowercase hex, for readable expectations.
func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String(format: "%02x", $0) }.joined(separator: " ")
}
