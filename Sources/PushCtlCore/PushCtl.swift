import Foundation
import Kafka
import PushDomain
import ServiceCore

/// `pushctl`: parses the command line, runs the command, maps errors to exit statuses
/// (`PushCtlExitCode`). Output goes to standard output; progress and errors to standard error.
public enum PushCtl {
    /// Runs `arguments` (without the program name) with `environment`.
    /// - Returns: the exit status.
    public static func run(_ given: [String], environment: [String: String] = ProcessInfo.processInfo.environment) async -> Int32 {
        // Global options (`--env-file`, `--bootstrap`, …) may come before the command too.
        let arguments = PushCtlCommand.hoistingLeadingOptions(given)
        let commandGiven = arguments.first.map { !$0.hasPrefix("-") } ?? false
        if !commandGiven || arguments.first == "help" {
            let wantsHelp = arguments.first == "help" || arguments.contains("--help") || arguments.contains("-h")
            if wantsHelp || arguments.isEmpty {
                print(PushCtlCommand.overview)
                return wantsHelp ? 0 : PushCtlExitCode.usage.rawValue
            }
            printError("pushctl: a command is required before or after the options (pushctl --help lists them)")
            return PushCtlExitCode.usage.rawValue
        }
        do {
            let (command, rest) = try PushCtlCommand.resolve(arguments)
            let parsed = try CommandLineArguments(rest, options: command.parsedOptions)
            if parsed.wantsHelp {
                print(command.help)
                return 0
            }
            let settings = try PushCtlSettings(environment: environment, envFile: parsed.value("env-file"))
            try await execute(command, parsed, settings)
            return 0
        } catch let error as CommandLineArguments.UsageError {
            printError("pushctl: \(error.message)")
            return PushCtlExitCode.usage.rawValue
        } catch let error as PushCtlError {
            printError("pushctl: \(error.message)")
            return error.exitCode.rawValue
        } catch let error as KafkaError {
            printError("pushctl: \(error)")
            return (error.isRetriable ? PushCtlExitCode.unavailable : .failed).rawValue
        } catch {
            printError("pushctl: \(error)")
            return PushCtlExitCode.failed.rawValue
        }
    }

    private static func execute(_ command: PushCtlCommand, _ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        switch command.name {
        case "register": try await RegistrationCommands.register(arguments, settings)
        case "unregister": try await RegistrationCommands.unregister(arguments, settings)
        case "send": try await SendCommand.run(arguments, settings)
        case "cancel": try await CancelCommand.run(arguments, settings)
        case "channel create": try await ChannelCommands.produce(.create, arguments, settings)
        case "channel delete": try await ChannelCommands.produce(.delete, arguments, settings)
        case "channel list": try await ChannelCommands.list(arguments, settings)
        case "follow": try await FollowCommand.run(arguments, settings)
        case "token show": try await TokenCommands.show(arguments, settings)
        case "token list": try await TokenCommands.list(arguments, settings)
        case "status": try await StatusCommand.run(arguments, settings)
        case "dead-letters list": try await DeadLetterCommands.list(arguments, settings)
        case "dead-letters redrive": try await DeadLetterCommands.redrive(arguments, settings)
        case "credentials list": try await CredentialsCommands.list(arguments, settings)
        case "credentials check": try CredentialsCommands.check(arguments, settings)
        case "sim faults", "sim counters", "sim reset", "sim unregister": try await SimulatorCommands.run(command, arguments, settings)
        default: throw CommandLineArguments.UsageError("unknown command \(command.name)")
        }
    }

    /// Writes `text` and a newline to standard error.
    static func printError(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
}

/// What `pushctl` reads from the environment (and `--env-file`): addresses, credentials, topics.
public struct PushCtlSettings: Sendable {
    /// The environment after `--env-file` filled in unset variables.
    public var environment: [String: String]
    /// The loader over `environment`.
    public var env: EnvironmentConfig { EnvironmentConfig(environment) }

    /// - Parameters:
    ///   - environment: the process environment.
    ///   - envFile: a file of `KEY=VALUE` lines whose keys fill in variables `environment` lacks.
    /// - Throws: `PushCtlError` (`.usage`) when the file cannot be read.
    public init(environment: [String: String], envFile: String?) throws {
        var merged = environment
        if let envFile {
            guard let text = try? String(contentsOfFile: envFile, encoding: .utf8) else {
                throw PushCtlError(.usage, "--env-file: cannot read \(envFile)")
            }
            for (key, value) in Self.parseEnvFile(text) where (merged[key] ?? "").isEmpty { merged[key] = value }
        }
        self.environment = merged
    }

    /// `KEY=VALUE` lines; blank lines and `#` comments skipped, one pair of surrounding quotes removed.
    public static func parseEnvFile(_ text: String) -> [(String, String)] {
        text.split(whereSeparator: \.isNewline).compactMap { line in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty, !trimmed.hasPrefix("#"), let equals = trimmed.firstIndex(of: "=") else { return nil }
            var key = String(trimmed[..<equals]).trimmingCharacters(in: .whitespaces)
            if key.hasPrefix("export ") { key = String(key.dropFirst(7)).trimmingCharacters(in: .whitespaces) }
            var value = String(trimmed[trimmed.index(after: equals)...]).trimmingCharacters(in: .whitespaces)
            if value.count >= 2, let first = value.first, first == "\"" || first == "'", value.last == first {
                value = String(value.dropFirst().dropLast())
            }
            return (key, value)
        }
    }

    /// `error` with a hint where its address came from when neither `option` nor `variable` set it
    /// (the default was used): the option, the variable, and `--env-file` for the local stack.
    func withSettingsHint(_ error: PushCtlError, variable: String, option: String) -> PushCtlError {
        guard env.string(variable) == nil else { return error }
        var hinted = error
        let unset = option == variable ? "\(variable) is not set" : "\(variable) is not set and \(option) was not given"
        hinted.message += " (\(unset): the default address was used; "
            + "for the local stack pass --env-file $PUSH_VAR_DIR/stack.env)"
        return hinted
    }

    /// A topic name: `PUSH_TOPIC_<NAME>` or the contract's default.
    public func topic(_ variable: String, default defaultName: String) -> String {
        env.string(variable, default: defaultName)
    }

    /// The send-requests topic.
    public var sendRequestsTopic: String { topic("PUSH_TOPIC_SEND_REQUESTS", default: PushTopic.sendRequests.name) }
    /// The feedback topic.
    public var feedbackTopic: String { topic("PUSH_TOPIC_FEEDBACK", default: PushTopic.feedback.name) }
    /// The dead-letter topic.
    public var deadLetterTopic: String { topic("PUSH_TOPIC_DEAD_LETTER", default: PushTopic.deadLetter.name) }

    /// Bootstrap servers from `--bootstrap` or `PUSH_KAFKA_BOOTSTRAP`.
    public func bootstrap(_ arguments: CommandLineArguments) -> [String] {
        (arguments.value("bootstrap") ?? env.string("PUSH_KAFKA_BOOTSTRAP", default: "127.0.0.1:9092"))
            .split(separator: ",").map(String.init)
    }

    /// The Kafka security properties (`KafkaSecurity(environment:)`).
    /// - Throws: `PushCtlError` (`.usage`) naming the bad variable.
    public func kafkaProperties() throws -> [String: String] {
        do {
            return try KafkaSecurity(environment: env).properties
        } catch {
            throw PushCtlError(.usage, "\(error)")
        }
    }
}
