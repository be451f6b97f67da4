import ServiceCore
import Synchronization

extension AdminServer {
    /// The admin port's settings as an executable reads them from its environment (README "Admin
    /// port"):
    ///
    /// - `PUSH_ADMIN_HOST` (default `0.0.0.0`), `PUSH_ADMIN_PORT` (default `defaultPort`; 0 picks one),
    ///   `PUSH_ADMIN_CONNECTION_LIMIT` (64);
    /// - `PUSH_HEALTH_MAX_LOOP_STALL_MS` (30000): `/healthz` fails when a loop has not come round for longer;
    /// - `PUSH_READY_MAX_POLL_AGE_MS` (10000), `PUSH_READY_MAX_DB_CHECK_AGE_MS` (15000): `/readyz` limits;
    /// - `PUSH_ADMIN_TEST_HOOKS` (false): serve test hooks under `POST /debug/<name>` (tests only);
    /// - `PUSH_METRICS_MAX_LABEL_VALUES` (100, 1…1,000,000): distinct values per label of a metric
    ///   family in `MetricsRegistry.shared`; later ones are counted under `other`.
    public struct Settings: Sendable {
        /// Where to listen.
        public var configuration: Configuration
        /// What `/healthz` decides with.
        public var liveness: LivenessPolicy
        /// What `/readyz` decides with.
        public var readiness: ReadinessPolicy
        /// Whether the executable's test hooks are served.
        public var testHooksEnabled: Bool
        /// Distinct values kept per label of a metric family (`MetricsRegistry.maximumLabelValues`).
        public var maximumLabelValues: Int

        /// Reads the variables above.
        /// - Parameters:
        ///   - env: the environment.
        ///   - defaultPort: the port when `PUSH_ADMIN_PORT` is unset.
        /// - Throws: `EnvironmentConfig.Error` naming a bad variable (unless `env` collects errors).
        public init(environment env: EnvironmentConfig, defaultPort: Int) throws {
            configuration = Configuration(port: try env.int("PUSH_ADMIN_PORT", default: defaultPort, in: 0...65535))
            configuration.host = env.string("PUSH_ADMIN_HOST", default: configuration.host)
            configuration.connectionLimit = try env.int("PUSH_ADMIN_CONNECTION_LIMIT", default: configuration.connectionLimit, in: 1...100_000)
            liveness = LivenessPolicy(maxBeatAge: try env.milliseconds("PUSH_HEALTH_MAX_LOOP_STALL_MS", default: .seconds(30)))
            readiness = ReadinessPolicy()
            readiness.maxPollAge = try env.milliseconds("PUSH_READY_MAX_POLL_AGE_MS", default: readiness.maxPollAge)
            readiness.maxDatabaseCheckAge = try env.milliseconds("PUSH_READY_MAX_DB_CHECK_AGE_MS", default: readiness.maxDatabaseCheckAge)
            testHooksEnabled = try env.bool("PUSH_ADMIN_TEST_HOOKS", default: false)
            maximumLabelValues = try MetricsRegistry.maximumLabelValues(environment: env)
        }
    }

    /// Starts the admin port of an executable with the standard endpoints: `/metrics` renders
    /// `MetricsRegistry.shared` (after registering `ProcessMetrics`), `/healthz` applies
    /// `settings.liveness` to `Heartbeats.shared`, `/readyz` applies `settings.readiness` to `readiness`.
    /// `push_ready` (gauge) is 1 while `/readyz` would answer 200, else 0, so that an alert sees readiness
    /// lost without probing (deploy/prometheus/alerts.yml).
    ///
    /// - Parameters:
    ///   - settings: read by `Settings(environment:defaultPort:)`.
    ///   - readiness: what `/readyz` decides from.
    ///   - testHooks: hooks served only when `settings.testHooksEnabled`.
    ///   - asyncRoutes: routes answered off the server's thread (see `AdminEndpoints.AsyncRoute`).
    /// - Throws: `EnvironmentConfig.Error` naming `PUSH_ADMIN_PORT` when the port cannot be bound.
    public static func start(
        settings: Settings, readiness: ReadinessState,
        testHooks: [String: @Sendable (_ query: (String) -> String?) -> AdminResponse] = [:],
        asyncRoutes: [AdminEndpoints.AsyncRoute] = []
    ) throws -> AdminServer {
        MetricsRegistry.shared.maximumLabelValues = settings.maximumLabelValues
        ProcessMetrics.register()
        let liveness = settings.liveness
        let policy = settings.readiness
        ReadyGauge.register { policy.evaluate(readiness.inputs()) }
        let endpoints = AdminEndpoints(
            metrics: { MetricsRegistry.shared.render() },
            liveness: { liveness.evaluate(Heartbeats.shared.snapshot()) },
            readiness: { policy.evaluate(readiness.inputs()) },
            testHooks: settings.testHooksEnabled ? testHooks : [:], asyncRoutes: asyncRoutes)
        do {
            return try start(configuration: settings.configuration, endpoints: endpoints)
        } catch {
            throw EnvironmentConfig.Error(variable: "PUSH_ADMIN_PORT", problem: "\(error.message)")
        }
    }
}

/// `push_ready`: the process's readiness as a metric. The registry keeps the first gauge of a name,
/// so the gauge reads the probe of the admin server started last (one per process outside tests).
enum ReadyGauge {
    private static let probe = Mutex<(@Sendable () -> ProbeReport)?>(nil)

    static func register(_ evaluate: @escaping @Sendable () -> ProbeReport) {
        probe.withLock { $0 = evaluate }
        _ = MetricsRegistry.shared.gaugeCallback("push_ready", help: "1 while /readyz passes, else 0") {
            guard let evaluate = probe.withLock({ $0 }) else { return [] }
            return [MetricSample(labels: [], value: evaluate().isPassing ? 1 : 0)]
        }
    }
}
