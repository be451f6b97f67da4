import Foundation
import Testing

/// The committed Swift must be exactly what `scripts/protoc-gen-swiftpush` makes of the committed
/// .proto files, so contracts and code cannot drift apart.
@Suite("protoc-gen-swiftpush output matches the committed code")
struct GeneratorTests {
    func generate(_ includes: [String], _ files: [String]) throws -> [String: String] {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("swiftpush-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: output) }
        let plugin = TestPaths.repository.appendingPathComponent("scripts/protoc-gen-swiftpush").path
        let result = try runTool("protoc", ["--plugin=protoc-gen-swiftpush=\(plugin)", "--swiftpush_out=\(output.path)"]
            + includes.flatMap { ["-I", $0] } + files)
        guard result.status == 0 else {
            throw ToolError(description: "protoc with protoc-gen-swiftpush failed (\(result.status)): \(result.stderr)")
        }
        return try contents(of: output)
    }

    func contents(of directory: URL) throws -> [String: String] {
        var files: [String: String] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) where name.hasSuffix(".pb.swift") {
            files[name] = try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
        }
        return files
    }

    func expectSame(generated: [String: String], committed directory: URL) throws {
        let committed = try contents(of: directory)
        #expect(generated.keys.sorted() == committed.keys.sorted(), "run scripts/gen-messages")
        #expect(!generated.isEmpty)
        for (name, text) in generated {
            #expect(committed[name] == text, "\(name) differs from the generator's output: run scripts/gen-messages")
        }
    }

    @Test func pushMessagesAreUpToDate() throws {
        let generated = try generate([TestPaths.protos.path], try TestPaths.pushProtoFiles())
        #expect(generated.keys.sorted() == ["Common.pb.swift", "DeadLetter.pb.swift", "Feedback.pb.swift", "SendRequest.pb.swift", "TokenRegistry.pb.swift"])
        try expectSame(generated: generated, committed: TestPaths.repository.appendingPathComponent("Sources/PushMessages"))
    }

    @Test func codecTestMessagesAreUpToDate() throws {
        let generated = try generate([TestPaths.testProtos.path], [TestPaths.testProtos.appendingPathComponent("codec_test.proto").path])
        try expectSame(generated: generated, committed: TestPaths.testsDirectory.appendingPathComponent("Generated"))
    }

    @Test func refusesProto2WithAClearError() throws {
        let plugin = TestPaths.repository.appendingPathComponent("scripts/protoc-gen-swiftpush").path
        let result = try runTool("protoc", ["--plugin=protoc-gen-swiftpush=\(plugin)", "--swiftpush_out=/tmp",
                                            "-I", TestPaths.testProtos.path, TestPaths.testProtos.appendingPathComponent("v2/push_v2.proto").path])
        #expect(result.status != 0)
        #expect(result.stderr.contains("only proto3 is supported"))
    }
}
