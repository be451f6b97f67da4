import ServiceCore

/// An executable's admin port as a `Service` (`ServiceMain.Start.infrastructure`): binds in `run`,
/// serves until graceful shutdown, then stops (suspended requests answered 503).
public struct AdminService: Service {
    /// The settings read at load.
    public let settings: AdminServer.Settings
    /// What `/readyz` decides from.
    public let readiness: ReadinessState
    /// Served only when `settings.testHooksEnabled`.
    public let testHooks: [String: @Sendable (_ query: (String) -> String?) -> AdminResponse]
    /// Routes answered off the server's thread.
    public let asyncRoutes: [AdminEndpoints.AsyncRoute]
    private let logger: Logger

    /// - Parameters: see the properties; `logger` receives "admin port listening" with the port.
    public init(
        settings: AdminServer.Settings, readiness: ReadinessState,
        testHooks: [String: @Sendable (_ query: (String) -> String?) -> AdminResponse] = [:],
        asyncRoutes: [AdminEndpoints.AsyncRoute] = [], logger: Logger
    ) {
        self.settings = settings
        self.readiness = readiness
        self.testHooks = testHooks
        self.asyncRoutes = asyncRoutes
        self.logger = logger
    }

    /// Listens until `shutdown` triggers; the async routes' handlers run as children of this call's task
    /// group (`AdminServer.serve()`). On the trigger (or cancellation) the server stops: suspended
    /// requests are answered 503, their handlers cancelled and awaited.
    /// - Throws: `EnvironmentConfig.Error` naming `PUSH_ADMIN_PORT` when the port cannot be bound.
    public func run(shutdown: GracefulShutdown) async throws {
        let server = try AdminServer.start(settings: settings, readiness: readiness, testHooks: testHooks, asyncRoutes: asyncRoutes)
        logger.info("admin port listening", ["admin_port": "\(server.port)"])
        await withDiscardingTaskGroup { group in
            group.addTask { await server.serve() }
            await shutdown.wait()
            server.stop()
        }
    }
}
