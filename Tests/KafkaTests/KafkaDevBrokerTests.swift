import Foundation
import ServiceCore
import Synchronization
import Testing

@testable import KafkaDevBroker
import Kafka

/// The `kafka-dev-broker` executable as a subprocess, driven through its control port by Python.
@Suite(.timeLimit(.minutes(1)))
struct KafkaDevBrokerTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    @Test func optionsParseDefaultsAndOverrides() throws {
        let options = try KafkaDevBroker.Options(arguments: ["--brokers", "2", "--topic", "push.feedback.v1:3", "--topic", "extra:2", "--control-port", "0"])
        #expect(options.brokers == 2)
        #expect(options.controlPort == 0)
        #expect(options.topics.map { "\($0.name):\($0.partitions)" } == [
            "push.token-events.v1:6", "push.send-requests.v1:6", "push.feedback.v1:3", "push.dead-letter.v1:1", "extra:2",
        ])
        #expect(throws: KafkaError.self) { try KafkaDevBroker.Options(arguments: ["--topic", "nopartitions"]) }
        #expect(throws: KafkaError.self) { try KafkaDevBroker.Options(arguments: ["--brokers", "0"]) }
    }

    /// The first of a signal and `quit` is the reason to stop, and the other wait is cancelled (without
    /// that the group would never return); a cancelled caller gets `end`.
    @Test func theFirstStopReasonWinsAndTheOtherWaitEnds() async {
        let quit = AsyncStream<Void>.makeStream()
        quit.continuation.yield()
        #expect(await KafkaDevBroker.firstStopReason(terminations: AsyncStream.makeStream().stream, quit: quit.stream) == "quit")
        let signals = AsyncStream<Int32>.makeStream()
        signals.continuation.yield(SIGTERM)
        #expect(await KafkaDevBroker.firstStopReason(terminations: signals.stream, quit: AsyncStream.makeStream().stream) == "signal \(SIGTERM)")
        let waiting = Task { await KafkaDevBroker.firstStopReason(terminations: AsyncStream.makeStream().stream, quit: AsyncStream.makeStream().stream) }
        waiting.cancel()
        #expect(await waiting.value == "end")
    }

    @Test func controlPortTakesBrokersDownAndUpAndSIGTERMStopsIt() async throws {
        let executable = TestSupport.packageRoot.appendingPathComponent(".build/debug/kafka-dev-broker").path
        try #require(FileManager.default.isExecutableFile(atPath: executable), "build the executable first: swift build --product kafka-dev-broker")
        let bootstrapFile = FileManager.default.temporaryDirectory.appendingPathComponent(TestSupport.unique("bootstrap")).path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["--brokers", "3", "--control-port", "0", "--bootstrap-file", bootstrapFile, "--topic", "devtest:2"]
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardInput = Pipe()
        process.standardError = FileHandle.nullDevice
        let exited = Mutex<CheckedContinuation<Int32, Never>?>(nil)
        let status = Mutex<Int32?>(nil)
        process.terminationHandler = { process in
            let code = process.terminationStatus
            let waiter = exited.withLock { w in
                defer { w = nil }
                return w
            }
            status.withLock { $0 = code }
            waiter?.resume(returning: code)
        }
        try process.run()
        defer { if process.isRunning { process.terminate() } }

        // First lines: bootstrap=…, control=…, ready (read on a dedicated thread: blocking reads).
        let reader = DedicatedThread(name: "dev-broker-stdout")
        let handle = stdout.fileHandleForReading
        let lines = try await reader.run { () -> [String] in
            var text = ""
            while text.components(separatedBy: "\n").count < 4 {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            return text.split(separator: "\n").map(String.init)
        }
        reader.shutdown()
        try #require(lines.count >= 3, "unexpected output \(lines)")
        #expect(lines[0].hasPrefix("bootstrap=127.0.0.1:"))
        #expect(lines[2] == "ready")
        let bootstrap = String(lines[0].dropFirst("bootstrap=".count))
        #expect(bootstrap.split(separator: ",").count == 3)
        let control = String(lines[1].dropFirst("control=".count))
        #expect(lines[1].hasPrefix("control=127.0.0.1:"))
        #expect((try? String(contentsOfFile: bootstrapFile, encoding: .utf8)) == bootstrap + "\n")

        let answers = try await TestSupport.python("control.py", [control, "topics", "down 1", "up 1", "down 9", "rtt 9 5", "rtt all -1", "rtt 2 0", "bogus"])
        #expect(answers.status == 0, "control.py failed: \(answers.stderr)")
        #expect(answers.stdout.split(separator: "\n").map(String.init) == [
            "ok push.token-events.v1:6,push.send-requests.v1:6,push.feedback.v1:6,push.dead-letter.v1:1,devtest:2",
            "ok", "ok", "error broker id must be 1...3, got 9",
            "error broker must be all or 1...3, got 9", "error round trip must be 0...60000 milliseconds, got -1", "ok",
            "error unknown command bogus; expected down ID, up ID, rtt ID|all MS, topics, create NAME:PARTITIONS, bootstrap or quit",
        ])

        // The broker serves our clients; a send to a partition led by a downed broker waits for `up`.
        let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(bootstrapServers: [bootstrap]), logger: TestSupport.logger)
        let report = try await producer.send(topic: "devtest", key: "k", value: Array("hello".utf8))
        // `rtt all MS` delays every answer: a send takes at least that long until `rtt all 0`.
        #expect(try await TestSupport.python("control.py", [control, "rtt all 400"]).stdout == "ok\n")
        let slowStart = ContinuousClock.now
        _ = try await producer.send(topic: "devtest", key: "k", value: Array("slow".utf8))
        #expect(slowStart.duration(to: .now) >= .milliseconds(400))
        #expect(try await TestSupport.python("control.py", [control, "rtt all 0"]).stdout == "ok\n")
        let all = try await TestSupport.python("control.py", [control, "down 1", "down 2", "down 3"])
        #expect(all.stdout == "ok\nok\nok\n")
        let pending = Task { try await producer.send(topic: "devtest", key: "k", value: Array("during".utf8)) }
        try await Task.sleep(for: .seconds(1.5))
        #expect(producer.pendingCount == 1)
        _ = try await TestSupport.python("control.py", [control, "up 1", "up 2", "up 3"])
        let after = try await pending.value
        #expect(after.partition == report.partition)
        #expect(after.offset > report.offset)
        await producer.shutdown()

        process.terminate()  // SIGTERM
        let code = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            let done = status.withLock { $0 }
            if let done {
                continuation.resume(returning: done)
            } else {
                exited.withLock { $0 = continuation }
                if let late = status.withLock({ $0 }), let waiter = exited.withLock({ w -> CheckedContinuation<Int32, Never>? in defer { w = nil }; return w }) {
                    waiter.resume(returning: late)
                }
            }
        }
        #expect(code == 0)
        #expect(process.terminationReason == .exit)
        #expect(!FileManager.default.fileExists(atPath: bootstrapFile))
    }
}
