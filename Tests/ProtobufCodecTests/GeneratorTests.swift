import Foundation
import PushMessages
import Testing

/// The committed Swift must be exactly what `scripts/protoc-gen-swiftpush` makes of the committed
/// .proto files, so contracts and code cannot drift apart.
@Suite("protoc-gen-swiftpush output matches the committed code")
struct GeneratorTests {
    func generate(_ includes: [String], _ files: [String], options: String? = nil) throws -> [String: String] {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("swiftpush-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: output) }
        let plugin = TestPaths.repository.appendingPathComponent("scripts/protoc-gen-swiftpush").path
        let result = try runTool("protoc", ["--plugin=protoc-gen-swiftpush=\(plugin)", "--swiftpush_out=\(output.path)"]
            + (options.map { ["--swiftpush_opt=\($0)"] } ?? []) + includes.flatMap { ["-I", $0] } + files)
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

    @Test func grpcHealthAndReflectionMessagesAreUpToDate() throws {
        let generated = try generate(
            [TestPaths.protos.path],
            ["grpc/health/v1/health.proto", "grpc/reflection/v1/reflection.proto"].map { TestPaths.protos.appendingPathComponent($0).path },
            options: "visibility=internal")
        try expectSame(generated: generated, committed: TestPaths.repository.appendingPathComponent("Sources/GRPC/Generated"))
    }

    /// Server reflection serves the checked-in FileDescriptorSet: it must be what `protoc
    /// --include_imports` makes of the committed .proto files today (scripts/gen-descriptor-set).
    @Test func descriptorSetIsUpToDate() throws {
        let files = try TestPaths.pushProtoFiles() + ["grpc/health/v1/health.proto", "grpc/reflection/v1/reflection.proto",
                                                      "grpc/reflection/v1alpha/reflection.proto"].map { TestPaths.protos.appendingPathComponent($0).path }
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("descriptor-set-\(UUID().uuidString).protoset")
        defer { try? FileManager.default.removeItem(at: output) }
        let result = try runTool("protoc", ["--include_imports", "-I", TestPaths.protos.path, "-o", output.path] + files)
        #expect(result.status == 0)
        let regenerated = try [UInt8](Data(contentsOf: output))
        let committed = try [UInt8](Data(contentsOf: TestPaths.protos.appendingPathComponent("push.protoset")))
        #expect(!regenerated.isEmpty)
        #expect(regenerated == committed, "Protos/push.protoset differs from protoc's output: run scripts/gen-messages")
        #expect(regenerated == PushDescriptorSet.bytes, "PushDescriptorSet.swift differs from protoc's output: run scripts/gen-messages")
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
