import Foundation
import ServiceCore
import Synchronization
import Testing

@testable import Kafka

/// Shared helpers for the Kafka tests.
enum TestSupport {
    static let logger = Logger(label: "kafka.test", logLevel: Logger.Level(name: ProcessInfo.processInfo.environment["LOG_LEVEL"] ?? "") ?? .error)

    /// The package root, found from this file's path.
    static let packageRoot: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Python helper scripts (outside the test target so SwiftPM does not treat them as sources).
    static let pythonDirectory = packageRoot.appendingPathComponent("Tests/KafkaTestsPython")

    /// A fresh name for topics and groups, so tests never see each other's records.
    static func unique(_ prefix: String) -> String {
        "\(prefix)-\(UInt32.random(in: 0...UInt32.max))"
    }

    /// The absolute path of `tool` on PATH. Fails the test clearly when it is missing.
    static func tool(_ name: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        Issue.record("required tool \(name) is not installed (not on PATH)", sourceLocation: sourceLocation)
        throw ToolMissing(name: name)
    }

    struct ToolMissing: Error { let name: String }

    struct ProcessResult: Sendable {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs `executable` with `arguments`, feeding `input` on stdin; kills it after `timeout`.
    static func run(_ executable: String, _ arguments: [String], input: Data? = nil, timeout: Duration = .seconds(30)) async throws -> ProcessResult {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(unique("proc"))
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let out = directory.appendingPathComponent("stdout")
        let err = directory.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        let stdin = Pipe()
        process.standardInput = stdin
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do {
                try process.run()
            } catch {
                process.terminationHandler = nil
                continuation.resume(throwing: error)
                return
            }
            if let input { stdin.fileHandleForWriting.write(input) }
            try? stdin.fileHandleForWriting.close()
            let killer = Task {
                try await Task.sleep(for: timeout)
                process.terminate()
            }
            _ = killer
        }
        return ProcessResult(
            status: status,
            stdout: (try? String(contentsOf: out, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOf: err, encoding: .utf8)) ?? "")
    }

    /// Runs a helper script from `Tests/KafkaTests/Python` with `python3`.
    static func python(_ script: String, _ arguments: [String], timeout: Duration = .seconds(60)) async throws -> ProcessResult {
        let python = try tool("python3")
        return try await run(python, [pythonDirectory.appendingPathComponent(script).path] + arguments, timeout: timeout)
    }

    /// Reads `count` messages from `consumer`, failing after `timeout`.
    static func collect(_ count: Int, from consumer: KafkaConsumer, timeout: Duration = .seconds(30)) async throws -> [KafkaMessage] {
        try await withThrowingTaskGroup(of: [KafkaMessage]?.self) { group in
            group.addTask {
                var collected: [KafkaMessage] = []
                for await message in consumer.messages {
                    collected.append(message)
                    if collected.count == count { break }
                }
                return collected
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            let first = try await group.next()!
            group.cancelAll()
            guard let messages = first else {
                throw TimedOut(what: "\(count) messages within \(timeout)")
            }
            return messages
        }
    }

    struct TimedOut: Error, CustomStringConvertible {
        let what: String
        var description: String { "timed out waiting for \(what)" }
    }

    static func consumerConfig(_ cluster: KafkaMockCluster, group: String, topics: [String]) -> KafkaConsumerConfiguration {
        var config = KafkaConsumerConfiguration(bootstrapServers: [cluster.bootstrapServers], groupID: group, topics: topics)
        config.sessionTimeout = .seconds(6)
        config.additionalProperties["topic.metadata.refresh.interval.ms"] = "1000"
        return config
    }

    static func producerConfig(_ cluster: KafkaMockCluster) -> KafkaProducerConfiguration {
        KafkaProducerConfiguration(bootstrapServers: [cluster.bootstrapServers])
    }
}

extension Array where Element == UInt8 {
    var utf8String: String { String(decoding: self, as: UTF8.self) }
}

/// A counter shared between tasks.
final class Counter: Sendable {
    private let value = Synchronization.Atomic<Int>(0)
    func increment() { value.add(1, ordering: .relaxed) }
    var current: Int { value.load(ordering: .relaxed) }
}

extension TestSupport {
    /// Finds, for each of `partitions` partitions of `topic`, a key that the producer's partitioner maps
    /// to it, by sending one warm-up record per candidate key. Returns the keys and how many records
    /// were sent (all of them land on the topic).
    static func keysByPartition(_ producer: KafkaProducer, topic: String, partitions: Int) async throws -> (keys: [KafkaPartition: String], sent: Int) {
        var keys: [KafkaPartition: String] = [:]
        var sent = 0
        while keys.count < partitions {
            let key = "key-\(sent)"
            let report = try await producer.send(topic: topic, key: key, value: Array("warm-up-\(sent)".utf8))
            sent += 1
            if keys[report.partition] == nil { keys[report.partition] = key }
            if sent > 200 { throw TimedOut(what: "keys for \(partitions) partitions") }
        }
        return (keys, sent)
    }
}

/// Everything a consumer delivers, collected by a task of its own.
final class MessageLog: Sendable {
    final class Store: Sendable { let messages = Mutex<[KafkaMessage]>([]) }
    private let store = Store()
    let task: Task<Void, Never>

    init(_ consumer: KafkaConsumer) {
        let store = self.store
        task = Task {
            for await message in consumer.messages { store.messages.withLock { $0.append(message) } }
        }
    }

    var all: [KafkaMessage] { store.messages.withLock { $0 } }
    var values: [String] { all.map { $0.value.utf8String } }
}
