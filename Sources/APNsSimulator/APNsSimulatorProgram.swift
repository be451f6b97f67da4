import AdminHTTP
import Foundation
import HTTP2
import ServiceCore

/// The `apns-simulator` executable: Apple's APNs provider API for tests, benchmarks and staging
/// systems. Its settings (README "APNs simulator") are read here, once, for `--help`,
/// `--check-config` and start alike (`ServiceMain`).
public enum APNsSimulatorProgram {
    /// What `apns-simulator --help` prints before the settings.
    public static let usage = """
        usage: apns-simulator [--check-config | --help]

        Serves Apple's APNs provider API (HTTP/2 over TLS) on PUSH_SIM_PRODUCTION_PORT and
        PUSH_SIM_SANDBOX_PORT, with a development-only, unauthenticated admin API on PUSH_SIM_ADMIN_PORT
        (faults, tokens, records, clock, key topics).
        PUSH_SIM_KEYS: KEYID:TEAMID:/path/pub.pem[:sandbox|:production][:topics=ID+ID…],…
        PUSH_SIM_CLIENT_CA_FILE enables certificate authentication; PUSH_SIM_CONFIG_FILE (JSON) sets
        faults, tokens and unregistered tokens; PUSH_SIM_CLOCK_OFFSET_MS moves its clock. The metrics
        admin port (PUSH_ADMIN_PORT) serves /metrics, /healthz and /readyz.
        """

    /// The program: `APNsSimulatorProgram.main.run()` is the whole of `main.swift`.
    public static let main = ServiceMain(program: "apns-simulator", usage: usage, load: load)

    /// Reads every setting the simulator starts with, including its configuration file.
    /// - Throws: `EnvironmentConfig.Error` at the first bad setting unless `env` collects errors.
    public static func load(_ env: EnvironmentConfig) throws -> ServiceMain.Launch {
        let certificate = try env.required("PUSH_SIM_TLS_CERT_FILE")
        let key = try env.required("PUSH_SIM_TLS_KEY_FILE")
        for (variable, path) in [("PUSH_SIM_TLS_CERT_FILE", certificate), ("PUSH_SIM_TLS_KEY_FILE", key)]
        where !path.isEmpty && !FileManager.default.isReadableFile(atPath: path) {
            try env.fail(variable, "cannot read \(path)")
        }
        let keys = env.string("PUSH_SIM_KEYS", default: "")
        var configuration = APNsSimulator.Configuration(
            certificateChainFile: certificate, privateKeyFile: key,
            trustedKeys: try env.attempt("PUSH_SIM_KEYS") { try APNsSimulator.TrustedKey.parseList(keys) } ?? [])
        configuration.host = env.string("PUSH_SIM_HOST", default: "127.0.0.1")
        configuration.productionPort = try env.int("PUSH_SIM_PRODUCTION_PORT", default: 2197, in: 0...65535)
        configuration.sandboxPort = try env.int("PUSH_SIM_SANDBOX_PORT", default: 2198, in: 0...65535)
        configuration.adminPort = try env.int("PUSH_SIM_ADMIN_PORT", default: 8081, in: 0...65535)
        configuration.adminHost = env.string("PUSH_SIM_ADMIN_HOST", default: "127.0.0.1")
        try HTTP2ServerLimits.apply(environment: env, to: &configuration.limits, settings: &configuration.settings)
        configuration.clientCAFile = env.string("PUSH_SIM_CLIENT_CA_FILE")
        if let caFile = configuration.clientCAFile, !FileManager.default.isReadableFile(atPath: caFile) {
            try env.fail("PUSH_SIM_CLIENT_CA_FILE", "cannot read \(caFile)")
        }
        configuration.recordLimit = try env.int("PUSH_SIM_RECORD_LIMIT", default: 10_000, in: 1...Int.max)
        configuration.channelLimit = try env.int("PUSH_SIM_CHANNEL_LIMIT", default: configuration.channelLimit, in: 1...10_000_000)
        configuration.eventLoopCount = try env.int("PUSH_SIM_EVENT_LOOPS", default: configuration.eventLoopCount, in: 1...Int.max)
        configuration.initialMaxConcurrentStreams = UInt32(
            clamping: try env.int("PUSH_SIM_INITIAL_MAX_CONCURRENT_STREAMS", default: 1, in: 1...Int.max))
        if env.string("PUSH_SIM_CLOCK_OFFSET_MS") != nil {
            configuration.clock = OffsetWallClock(offsetMilliseconds: Int64(try env.int("PUSH_SIM_CLOCK_OFFSET_MS", default: 0)))
        }
        if let path = env.string("PUSH_SIM_CONFIG_FILE") {
            _ = try env.attempt("PUSH_SIM_CONFIG_FILE") { try configuration.apply(configFile: path) }
        }
        let admin = try AdminServer.Settings(environment: env, defaultPort: 9103)
        let simulator = configuration
        return ServiceMain.Launch(gracePeriod: .seconds(5)) { logger in
            let readiness = ReadinessState()
            return ServiceMain.Start(
                services: [APNsSimulatorService(configuration: simulator, readiness: readiness, logger: logger)],
                infrastructure: [AdminService(settings: admin, readiness: readiness, logger: logger)])
        }
    }
}

/// The simulator as a `Service`: listens in `run`, until graceful shutdown.
public struct APNsSimulatorService: Service {
    /// The simulator's settings.
    public let configuration: APNsSimulator.Configuration
    /// Set to running once listening, stopping at shutdown.
    public let readiness: ReadinessState
    private let logger: Logger

    /// - Parameters: see the properties; `logger` receives "apns-simulator ready" with the ports.
    public init(configuration: APNsSimulator.Configuration, readiness: ReadinessState, logger: Logger) {
        self.configuration = configuration
        self.readiness = readiness
        self.logger = logger
    }

    /// Listens until `shutdown` triggers, then stops (open streams get one second).
    /// - Throws: `APNsSimulatorError` when a port cannot be bound or a TLS file cannot be loaded.
    public func run(shutdown: GracefulShutdown) async throws {
        let simulator = try APNsSimulator.start(configuration: configuration)
        readiness.setPhase(.running)
        logger.info("apns-simulator ready", [
            "production_port": "\(simulator.productionPort)", "sandbox_port": "\(simulator.sandboxPort)",
            "admin_port": simulator.adminPort.map { "\($0)" } ?? "off",
            "certificate_auth": configuration.clientCAFile == nil ? "off" : "on",
        ])
        await shutdown.wait()
        logger.info("apns-simulator stopping")
        readiness.setPhase(.stopping)
        await simulator.shutdown()
    }
}
