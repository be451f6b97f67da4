import ServiceCore

extension AdminServer {
    /// Starts the admin port of an executable from its environment, with the standard endpoints:
    /// `/metrics` renders `MetricsRegistry.shared` (after registering `ProcessMetrics`), `/healthz`
    /// applies `LivenessPolicy` to `Heartbeats.shared`, `/readyz` applies `ReadinessPolicy` to
    /// `readiness`. Variables (README "Admin port"):
    ///
    /// - `PUSH_ADMIN_HOST` (default `0.0.0.0`), `PUSH_ADMIN_PORT` (default `defaultPort`; 0 picks one),
    ///   `PUSH_ADMIN_CONNECTION_LIMIT` (64);
    /// - `PUSH_HEALTH_MAX_LOOP_STALL_MS` (30000): `/healthz` fails when a loop has not come round for longer;
    /// - `PUSH_READY_MAX_POLL_AGE_MS` (10000), `PUSH_READY_MAX_DB_CHECK_AGE_MS` (15000): `/readyz` limits;
    /// - `PUSH_ADMIN_TEST_HOOKS` (false): serve `testHooks` under `POST /debug/<name>` (tests only);
    /// - `PUSH_METRICS_MAX_LABEL_VALUES` (100): distinct values per label of a metric family
    ///   (`MetricsRegistry.configureShared(environment:)`).
    ///
    /// - Parameters:
    ///   - env: the environment.
    ///   - defaultPort: the port when `PUSH_ADMIN_PORT` is unset.
    ///   - readiness: what `/readyz` decides from.
    ///   - testHooks: hooks served only when `PUSH_ADMIN_TEST_HOOKS` is true.
    ///   - asyncRoutes: routes answered off the server's thread (see `AdminEndpoints.AsyncRoute`).
    /// - Throws: `EnvironmentConfig.Error` naming a bad variable; `AdminServerError` when the port cannot be bound.
    public static func start(
        environment env: EnvironmentConfig, defaultPort: Int, readiness: ReadinessState,
        testHooks: [String: @Sendable (_ query: (String) -> String?) -> AdminResponse] = [:],
        asyncRoutes: [AdminEndpoints.AsyncRoute] = []
    ) throws -> AdminServer {
        var configuration = Configuration(port: try env.int("PUSH_ADMIN_PORT", default: defaultPort, in: 0...65535))
        configuration.host = env.string("PUSH_ADMIN_HOST", default: configuration.host)
        configuration.connectionLimit = try env.int("PUSH_ADMIN_CONNECTION_LIMIT", default: configuration.connectionLimit, in: 1...100_000)
        let liveness = LivenessPolicy(maxBeatAge: try env.milliseconds("PUSH_HEALTH_MAX_LOOP_STALL_MS", default: .seconds(30)))
        var policy = ReadinessPolicy()
        policy.maxPollAge = try env.milliseconds("PUSH_READY_MAX_POLL_AGE_MS", default: policy.maxPollAge)
        policy.maxDatabaseCheckAge = try env.milliseconds("PUSH_READY_MAX_DB_CHECK_AGE_MS", default: policy.maxDatabaseCheckAge)
        let hooks = try env.bool("PUSH_ADMIN_TEST_HOOKS", default: false) ? testHooks : [:]
        try MetricsRegistry.configureShared(environment: env)
        ProcessMetrics.register()
        let endpoints = AdminEndpoints(
            metrics: { MetricsRegistry.shared.render() },
            liveness: { liveness.evaluate(Heartbeats.shared.snapshot()) },
            readiness: { [policy] in policy.evaluate(readiness.inputs()) },
            testHooks: hooks, asyncRoutes: asyncRoutes)
        do {
            return try start(configuration: configuration, endpoints: endpoints)
        } catch {
            throw EnvironmentConfig.Error(variable: "PUSH_ADMIN_PORT", problem: "\(error.message)")
        }
    }
}
