import Foundation
import Kafka
import PushDomain
import ServiceCore
import Synchronization

/// The development broker behind the `kafka-dev-broker` executable: a `KafkaMockCluster` with the
/// project's topics, controlled by line commands on stdin and on a loopback TCP port.
///
/// Command line:
/// ```
/// kafka-dev-broker [--brokers N] [--topic NAME:PARTITIONS]... [--bootstrap-file PATH] [--control-port PORT]
/// ```
/// - `--brokers N`: number of brokers, ids 1...N (default 3).
/// - `--topic NAME:PARTITIONS`: a topic to create; overrides the default partition count of a project
///   topic or adds a topic (repeatable). Defaults: `push.token-events.v1:6`, `push.send-requests.v1:6`,
///   `push.feedback.v1:6`, `push.dead-letter.v1:1`.
/// - `--bootstrap-file PATH`: also write `HOST:PORT,…` (one line) to PATH, after the topics exist.
/// - `--control-port PORT`: listen for control commands on 127.0.0.1:PORT (0 picks a free port). Development
///   only and unauthenticated (anyone who reaches it can take brokers down), so it binds to loopback only.
///
/// Standard output: first line `bootstrap=HOST:PORT,…`; then `control=127.0.0.1:PORT` when a control
/// port was asked for; then `ready`. The brokers' ports are random: librdkafka 2.0.2's mock has no
/// setting for fixed ports, so scripts read the first line or the bootstrap file.
///
/// Control protocol (stdin, and TCP: any number of connections, one command per line, one answer
/// line per command):
/// - `down <broker-id>` / `up <broker-id>`: take a broker down (connections closed, new ones refused)
///   or bring it back. Answer `ok`.
/// - `rtt <broker-id|all> <milliseconds>`: delay every response of that broker (or of every broker)
///   by that many milliseconds from now on; 0 ends the delay (a slow broker, for benchmarks and
///   tests of what a slow produce round trip costs). Answer `ok`.
/// - `topics`: answer `ok NAME:PARTITIONS,…` (topics created by this process).
/// - `create NAME:PARTITIONS`: create a topic. Answer `ok`.
/// - `bootstrap`: answer `ok HOST:PORT,…`.
/// - `quit`: answer `ok`, then exit with status 0.
/// Errors answer `error <explanation>`. The process exits cleanly on SIGTERM and SIGINT too; end of
/// stdin does not stop it (so it can run in the background with `</dev/null`).
public enum KafkaDevBroker {
    /// The project's topics and their default partition counts.
    public static let defaultTopics: [(name: String, partitions: Int)] = PushTopic.allCases.map { ($0.name, $0.developmentPartitions) }

    /// Parsed command line.
    public struct Options: Sendable, Equatable {
        /// Number of brokers (ids 1...brokers).
        public var brokers = 3
        /// Topics to create, in order, with partition counts.
        public var topics: [Topic] = KafkaDevBroker.defaultTopics.map { Topic(name: $0.name, partitions: $0.partitions) }
        /// Where to write the bootstrap servers, if anywhere.
        public var bootstrapFile: String?
        /// Control port on 127.0.0.1 (0 = any free port), or `nil` for none.
        public var controlPort: Int?

        /// A topic and its partition count.
        public struct Topic: Sendable, Equatable {
            public var name: String
            public var partitions: Int
        }

        public init() {}

        /// Parses `arguments` (without the program name).
        /// - Throws: `KafkaError` (`invalidArgument`) naming the bad argument.
        public init(arguments: [String]) throws(KafkaError) {
            var iterator = arguments.makeIterator()
            func value(_ flag: String) throws(KafkaError) -> String {
                guard let value = iterator.next() else { throw KafkaError(code: .invalidArgument, message: "\(flag) needs a value") }
                return value
            }
            while let argument = iterator.next() {
                switch argument {
                case "--brokers":
                    let raw = try value(argument)
                    guard let count = Int(raw), (1...32).contains(count) else {
                        throw KafkaError(code: .invalidArgument, message: "--brokers expects 1...32, got \(raw)")
                    }
                    brokers = count
                case "--topic":
                    let topic = try Self.parseTopic(try value(argument))
                    if let index = topics.firstIndex(where: { $0.name == topic.name }) {
                        topics[index] = topic
                    } else {
                        topics.append(topic)
                    }
                case "--bootstrap-file":
                    bootstrapFile = try value(argument)
                case "--control-port":
                    let raw = try value(argument)
                    guard let port = Int(raw), (0...65535).contains(port) else {
                        throw KafkaError(code: .invalidArgument, message: "--control-port expects 0...65535, got \(raw)")
                    }
                    controlPort = port
                default:
                    throw KafkaError(code: .invalidArgument, message: "unknown argument \(argument); usage: kafka-dev-broker [--brokers N] [--topic NAME:PARTITIONS]... [--bootstrap-file PATH] [--control-port PORT]")
                }
            }
        }

        static func parseTopic(_ text: String) throws(KafkaError) -> Topic {
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, let partitions = Int(parts[1]), partitions > 0 else {
                throw KafkaError(code: .invalidArgument, message: "topic must be NAME:PARTITIONS with PARTITIONS > 0, got \(text)")
            }
            return Topic(name: String(parts[0]), partitions: partitions)
        }
    }

    /// What `kafka-dev-broker --help` prints.
    public static let usage = """
        usage: kafka-dev-broker [--brokers N] [--topic NAME:PARTITIONS]... [--bootstrap-file PATH] [--control-port PORT]
               kafka-dev-broker --check-config [options]   check the options, exit 0 or 2
               kafka-dev-broker --help

        librdkafka's mock cluster with the project's topics (push.token-events.v1:6, push.send-requests.v1:6,
        push.feedback.v1:6, push.dead-letter.v1:1), for development and tests only. Prints bootstrap=HOST:PORT,…,
        then control=127.0.0.1:PORT with --control-port, then ready. Control commands (stdin or the control
        port, one per line): down ID, up ID, rtt ID|all MS, topics, create NAME:PARTITIONS, bootstrap, quit.
        """

    /// Runs the broker until `quit`, SIGTERM or SIGINT (`--help`: prints `usage`; `--check-config`:
    /// checks the options; neither starts a broker). Returns the process exit status.
    public static func run(arguments: [String], logger: Logger = Logger(label: "kafka-dev-broker")) async -> Int32 {
        ProcessSignals.ignoreSIGPIPE()
        if arguments.contains("--help") || arguments.contains("-h") {
            print(usage)
            return 0
        }
        let options: Options
        do {
            options = try Options(arguments: arguments.filter { $0 != "--check-config" })
        } catch {
            FileHandle.standardError.write(Data("kafka-dev-broker: \(error.message)\n".utf8))
            return 2
        }
        if arguments.contains("--check-config") {
            print("kafka-dev-broker: \(options.brokers) brokers, topics \(options.topics.map { "\($0.name):\($0.partitions)" }.joined(separator: ","))\nconfiguration OK")
            return 0
        }
        do {
            try await run(options: options, logger: logger)
            return 0
        } catch {
            FileHandle.standardError.write(Data("kafka-dev-broker: \(error)\n".utf8))
            return 1
        }
    }

    /// Runs the broker with parsed `options` until `quit`, SIGTERM or SIGINT.
    /// - Throws: `KafkaError` when the cluster, a topic or the control port cannot be set up.
    public static func run(options: Options, logger: Logger) async throws {
        let cluster = try KafkaMockCluster(brokers: options.brokers, logger: logger)
        let controller = DevBrokerController(cluster: cluster)
        for topic in options.topics { _ = controller.execute("create \(topic.name):\(topic.partitions)") }
        let output = LineWriter()
        output.write("bootstrap=\(cluster.bootstrapServers)")
        if let path = options.bootstrapFile {
            do {
                try (cluster.bootstrapServers + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            } catch {
                throw KafkaError(code: .invalidArgument, message: "cannot write --bootstrap-file \(path): \(error)")
            }
        }
        var server: ControlServer?
        if let port = options.controlPort {
            server = try ControlServer(port: port, controller: controller, logger: logger)
            output.write("control=127.0.0.1:\(server!.port)")
        }
        // Subscribed before `ready`, so a SIGTERM sent as soon as a script reads `ready` is not lost.
        let terminations = ProcessSignals.signals([SIGTERM, SIGINT])
        output.write("ready")
        logger.info("dev broker ready", ["bootstrap": cluster.bootstrapServers, "brokers": String(options.brokers)])

        NamedThread.start(name: "dev-broker-stdin") {
            while let line = readLine() {
                let answer = controller.execute(line)
                output.write(answer)
            }
        }

        let quit = AsyncStream<Void>.makeStream()
        controller.onQuit = { quit.continuation.yield() }
        let reason = await firstStopReason(terminations: terminations, quit: quit.stream)
        logger.info("dev broker stopping", ["reason": reason])
        server?.stop()
        if let path = options.bootstrapFile { try? FileManager.default.removeItem(atPath: path) }
        withExtendedLifetime(cluster) {}
    }
}

extension KafkaDevBroker {
    /// Waits for the first reason to stop: a signal from `terminations`, or `quit` (the `quit` command,
    /// from stdin or a control connection). Each is a child of one task group; the other is cancelled
    /// once one returns (both streams end on cancellation).
    /// - Returns: `"signal N"` (N the signal number), `"quit"`, or `"end"` when the calling task was
    ///   cancelled or both streams finished first.
    static func firstStopReason(terminations: AsyncStream<Int32>, quit: AsyncStream<Void>) async -> String {
        await withTaskGroup(of: String?.self) { group in
            group.addTask {
                for await signal in terminations { return "signal \(signal)" }
                return nil
            }
            group.addTask {
                for await _ in quit { return "quit" }
                return nil
            }
            defer { group.cancelAll() }
            for await reason in group {
                if let reason { return reason }
            }
            return "end"
        }
    }
}

/// Writes whole lines to stdout and flushes them at once (stdout is a pipe for scripts and tests).
final class LineWriter: Sendable {
    private let lock = Mutex(())

    func write(_ line: String) {
        lock.withLock { _ in
            FileHandle.standardOutput.write(Data((line + "\n").utf8))
        }
    }
}

/// Executes control commands against the cluster. Thread-safe: commands come from the stdin thread
/// and from control connections.
final class DevBrokerController: Sendable {
    private let cluster: KafkaMockCluster
    private let topics = Mutex<[(String, Int)]>([])
    private let quitHandler = Mutex<(@Sendable () -> Void)?>(nil)

    init(cluster: KafkaMockCluster) { self.cluster = cluster }

    var onQuit: (@Sendable () -> Void)? {
        get { quitHandler.withLock { $0 } }
        set { quitHandler.withLock { $0 = newValue } }
    }

    /// The broker id `word` names, if it is one of the cluster's (1...N).
    private func brokerID(_ word: String) -> Int32? {
        Int32(word).flatMap { (1...Int32(cluster.brokerCount)).contains($0) ? $0 : nil }
    }

    /// Runs one command line and returns the answer line (`ok…` or `error …`).
    func execute(_ line: String) -> String {
        let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" }).map(String.init)
        guard let command = words.first?.lowercased() else { return "error empty command" }
        do {
            switch (command, words.count) {
            case ("down", 2), ("up", 2):
                guard let id = brokerID(words[1]) else {
                    return "error broker id must be 1...\(cluster.brokerCount), got \(words[1])"
                }
                if command == "down" { try cluster.setBrokerDown(id) } else { try cluster.setBrokerUp(id) }
                return "ok"
            case ("rtt", 3):
                guard let id = words[1].lowercased() == "all" ? -1 : brokerID(words[1]) else { return "error broker must be all or 1...\(cluster.brokerCount), got \(words[1])" }
                guard let milliseconds = Int(words[2]), (0...60_000).contains(milliseconds) else {
                    return "error round trip must be 0...60000 milliseconds, got \(words[2])"
                }
                try cluster.setBrokerRoundTripTime(id, milliseconds: milliseconds)
                return "ok"
            case ("topics", 1):
                let list = topics.withLock { $0.map { "\($0.0):\($0.1)" } }
                return "ok " + list.joined(separator: ",")
            case ("create", 2):
                let topic = try KafkaDevBroker.Options.parseTopic(words[1])
                try cluster.createTopic(topic.name, partitions: topic.partitions)
                topics.withLock { $0.append((topic.name, topic.partitions)) }
                return "ok"
            case ("bootstrap", 1):
                return "ok \(cluster.bootstrapServers)"
            case ("quit", 1):
                onQuit?()
                return "ok"
            default:
                return "error unknown command \(line.trimmingCharacters(in: .whitespacesAndNewlines)); expected down ID, up ID, rtt ID|all MS, topics, create NAME:PARTITIONS, bootstrap or quit"
            }
        } catch {
            return "error \(error.message)"
        }
    }
}
