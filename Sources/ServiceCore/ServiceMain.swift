import Foundation

/// The start-up every executable shares, so that `--help`, `--check-config` and a real start read the
/// same settings in the same way (README "Settings").
///
/// - `PROGRAM --help` (or `-h`): prints `usage`, then every variable `load` reads with its default,
///   and exits 0 without starting anything.
/// - `PROGRAM --check-config`: runs `load` (which reads every variable, key file, `.p8` and
///   certificate that start reads) collecting every problem, prints the effective configuration
///   (`EnvironmentConfig.checkReport`) with one `error: VARIABLE: problem` line per problem, and exits
///   0, or 2 when a setting is bad, without binding or connecting.
/// - `PROGRAM`: runs the same `load`; any problem is logged, one line each, and the process exits 1
///   before anything starts. Otherwise `Launch.start` builds the services, which run in one
///   `ServiceGroup` (SIGTERM/SIGINT → graceful shutdown, bounded by `Launch.gracePeriod`) stopped in
///   reverse start order: the `Start.infrastructure` services (admin ports) start first and are asked
///   to stop only once the program's services (a nested group) have returned. Exit 0 after a graceful
///   stop, 1 otherwise.
///
/// `LOG_LEVEL` and `LOG_FORMAT` are read (and checked) for every program.
public struct ServiceMain: Sendable {
    /// What `load` prepared: settings already read and checked, and how to start from them.
    public struct Launch: Sendable {
        /// Upper bound on graceful shutdown (`PUSH_SHUTDOWN_GRACE_MS` where the program has it).
        public var gracePeriod: Duration
        /// Builds the services from the loaded settings. May bind ports and open files; must not read
        /// the environment. Throws to stop the process with status 1.
        public var start: @Sendable (Logger) throws -> Start

        /// - Parameters:
        ///   - gracePeriod: see the property.
        ///   - start: see the property.
        public init(gracePeriod: Duration, start: @escaping @Sendable (Logger) throws -> Start) {
            self.gracePeriod = gracePeriod
            self.start = start
        }
    }

    /// The services of a started process.
    public struct Start: Sendable {
        /// The program's own services, run in one `ServiceGroup` in this order and stopped together.
        public var services: [any Service]
        /// Services that serve the others (admin ports): started before the group, asked to shut down
        /// gracefully only once the group has returned (so `/metrics` and `/readyz` answer during the
        /// drain). One that fails on its own shuts the group down and makes the exit status 1.
        public var infrastructure: [any Service]

        /// - Parameters:
        ///   - services: see the property.
        ///   - infrastructure: see the property.
        public init(services: [any Service], infrastructure: [any Service] = []) {
            self.services = services
            self.infrastructure = infrastructure
        }
    }

    /// The executable's name, used in messages.
    public let program: String
    /// The text `--help` prints before the list of variables: a synopsis and what the program does.
    public let usage: String
    /// Reads every setting from the environment (through the loader given, never `ProcessInfo`) and
    /// checks every file it names. Reports problems through the loader (`fail`, `attempt`, or a typed
    /// read), which collects them; it may also throw, which counts as one more problem.
    public let load: @Sendable (EnvironmentConfig) throws -> Launch

    /// - Parameters:
    ///   - program: see the property.
    ///   - usage: see the property.
    ///   - load: see the property.
    public init(program: String, usage: String, load: @escaping @Sendable (EnvironmentConfig) throws -> Launch) {
        self.program = program
        self.usage = usage
        self.load = load
    }

    /// What the command line asks for.
    public enum Mode: Sendable, Equatable {
        case start, help, checkConfig
        /// An argument the program does not know.
        case unknown(String)

        /// Reads `arguments` (without the program name): `--help`/`-h` wins over `--check-config`.
        public init(arguments: [String]) {
            if arguments.contains("--help") || arguments.contains("-h") {
                self = .help
            } else if let unknown = arguments.first(where: { $0 != "--check-config" }) {
                self = .unknown(unknown)
            } else {
                self = arguments.isEmpty ? .start : .checkConfig
            }
        }
    }

    /// The result of loading: the launch when every setting is good, and the loader (its entries,
    /// errors and warnings).
    public struct Loaded: Sendable {
        /// `nil` when a setting is bad.
        public var launch: Launch?
        /// The loader `load` read through.
        public var environment: EnvironmentConfig
    }

    /// Runs `load` over `environment`, collecting every problem (`LOG_LEVEL` and `LOG_FORMAT` first).
    public func loadSettings(environment: [String: String]) -> Loaded {
        let env = EnvironmentConfig(environment, collectingErrors: true)
        let level = env.string("LOG_LEVEL", default: "info")
        if Logger.Level(name: level) == nil {
            try? env.fail("LOG_LEVEL", "expected trace, debug, info, notice, warning, error or critical, got \"\(level)\"")
        }
        let format = env.string("LOG_FORMAT", default: "logfmt")
        if Logger.Format(name: format) == nil { try? env.fail("LOG_FORMAT", "expected logfmt or json, got \"\(format)\"") }
        var launch: Launch?
        do {
            launch = try load(env)
        } catch let error as EnvironmentConfig.Error {
            try? env.fail(error.variable, error.problem)
        } catch {
            try? env.fail("(configuration)", "\(error)")
        }
        return Loaded(launch: env.errors.isEmpty ? launch : nil, environment: env)
    }

    /// The text of `--help`: `usage`, then each variable `load` reads with its default.
    public func helpText() -> String {
        let env = loadSettings(environment: [:]).environment
        var lines = [usage, "", "Options:", "  --help           print this text and exit", "  --check-config   check every setting, print the effective configuration, exit 0 or 2", "", "Settings (environment variables, default in brackets):"]
        for entry in env.entries {
            lines.append("  \(entry.variable)" + (entry.value.map { " [\(EnvironmentConfig.mask(entry.variable, $0))]" } ?? ""))
        }
        return lines.joined(separator: "\n")
    }

    /// Runs the program as `arguments` ask.
    /// - Parameters:
    ///   - arguments: the command line without the program name.
    ///   - environment: the process environment.
    /// - Returns: the exit status: 0 after `--help`, a passing check or a graceful stop; 2 for a failing
    ///   check or an unknown argument; 1 when start fails or the stop was not graceful.
    public func run(
        arguments: [String] = Array(CommandLine.arguments.dropFirst()), environment: [String: String] = ProcessInfo.processInfo.environment
    ) async -> Int32 {
        ProcessSignals.ignoreSIGPIPE()
        switch Mode(arguments: arguments) {
        case .help:
            print(helpText())
            return 0
        case .unknown(let argument):
            FileHandle.standardError.write(Data("\(program): unknown argument \(argument) (\(program) --help lists the options)\n".utf8))
            return 2
        case .checkConfig:
            let loaded = loadSettings(environment: environment)
            print(loaded.environment.checkReport(program: program))
            return loaded.environment.checkExitStatus
        case .start:
            return await start(environment: environment)
        }
    }

    private func start(environment: [String: String]) async -> Int32 {
        let logger = Logger(label: program)
        let loaded = loadSettings(environment: environment)
        for warning in loaded.environment.warnings { logger.warning("configuration: \(warning.variable): \(warning.problem)") }
        guard let launch = loaded.launch else {
            for error in loaded.environment.errors { logger.critical("configuration invalid: \(error.variable): \(error.problem)") }
            logger.critical("\(program) not started: \(loaded.environment.errors.count) bad setting(s); \(program) --check-config lists them")
            return 1
        }
        let started: Start
        do {
            started = try launch.start(logger)
        } catch {
            logger.critical("\(program) failed to start: \(error)")
            return 1
        }
        // One tree under one grace period: the infrastructure (admin ports) started first and asked to
        // stop only once the program's own services (a nested group, stopped together) have returned.
        let lifecycle = logger.with(["component": "lifecycle"])
        let services = ServiceGroup(services: started.services, configuration: .nested(shutdownOrder: .concurrent), logger: lifecycle)
        let group = ServiceGroup(
            configuredServices: started.infrastructure.map { .init(Infrastructure(service: $0), name: String(describing: type(of: $0))) }
                + [.init(services, name: program)],
            configuration: .init(gracePeriod: launch.gracePeriod, shutdownOrder: .reverseStartOrder), logger: lifecycle)
        do {
            let outcome = try await group.run()
            logger.info("\(program) exiting", ["outcome": "\(outcome)"])
            return outcome.isGraceful ? 0 : 1
        } catch {
            logger.critical("\(program) failed: \(error)")
            return 1
        }
    }
}

/// An infrastructure service of `ServiceMain`: ending before it was asked to stop is a failure (the
/// tree shuts down and the process exits 1).
private struct Infrastructure: Service {
    struct EndedEarly: Error, CustomStringConvertible {
        let name: String
        var description: String { "\(name) ended before it was asked to stop" }
    }

    let service: any Service

    func run(shutdown: GracefulShutdown) async throws {
        try await service.run(shutdown: shutdown)
        if !shutdown.isTriggered, !Task.isCancelled { throw EndedEarly(name: String(describing: type(of: service))) }
    }
}
