import ServiceCore

/// What the admin port serves; each closure runs on libmicrohttpd's thread and must return quickly
/// from state already at hand (see `AdminServer`).
public struct AdminEndpoints: Sendable {
    /// The body of `/metrics` (Prometheus text format 0.0.4), e.g. `MetricsRegistry.shared.render()`.
    public var metrics: @Sendable () -> String
    /// `/healthz`.
    public var liveness: @Sendable () -> ProbeReport
    /// `/readyz`.
    public var readiness: @Sendable () -> ProbeReport
    /// `POST /debug/<name>` handlers, given a query-parameter lookup. Empty unless the executable
    /// enabled its test hooks (`PUSH_ADMIN_TEST_HOOKS=1`).
    public var testHooks: [String: @Sendable (_ query: (String) -> String?) -> AdminResponse]
    /// Routes whose answer needs I/O (a database query): served off libmicrohttpd's thread, see
    /// `AsyncRoute`. Checked before the fixed routes.
    public var asyncRoutes: [AsyncRoute]
    /// How long an async route may take; then the client gets 503 with a JSON error. Default 10 s.
    public var asyncTimeout: Duration = .seconds(10)

    /// A family of `GET`/`HEAD` routes answered asynchronously: every path that starts with `prefix`
    /// (`/v1/requests/`). While `handler` runs, the connection is suspended
    /// (`MHD_suspend_connection`), so the server's thread keeps serving `/metrics` and the probes.
    /// Other methods get 405.
    public struct AsyncRoute: Sendable {
        /// The path prefix, e.g. `/v1/requests/`.
        public var prefix: String
        /// Answers for the rest of the path after `prefix` (percent-decoded by libmicrohttpd).
        public var handler: @Sendable (_ rest: String) async -> AdminResponse

        /// - Parameters: see the properties.
        public init(prefix: String, handler: @escaping @Sendable (_ rest: String) async -> AdminResponse) {
            self.prefix = prefix
            self.handler = handler
        }
    }

    /// How a request is answered: at once from state at hand, or later by an async route.
    public enum Route: Sendable {
        /// Answered on the server's thread.
        case immediate(AdminResponse)
        /// Answered when the closure returns (or 503 after `asyncTimeout`).
        case deferred(@Sendable () async -> AdminResponse)
    }

    /// - Parameters: see the properties.
    public init(metrics: @escaping @Sendable () -> String, liveness: @escaping @Sendable () -> ProbeReport,
                readiness: @escaping @Sendable () -> ProbeReport,
                testHooks: [String: @Sendable (_ query: (String) -> String?) -> AdminResponse] = [:],
                asyncRoutes: [AsyncRoute] = []) {
        self.metrics = metrics
        self.liveness = liveness
        self.readiness = readiness
        self.testHooks = testHooks
        self.asyncRoutes = asyncRoutes
    }

    /// Routes one request (no I/O): an async route's deferred answer, else `respond`'s.
    public func route(method: String, path: String, query: (String) -> String?) -> Route {
        if let route = asyncRoutes.first(where: { path.hasPrefix($0.prefix) }) {
            guard method == "GET" || method == "HEAD" else { return .immediate(Self.methodNotAllowed(method, path)) }
            let rest = String(path.dropFirst(route.prefix.count))
            return .deferred { await route.handler(rest) }
        }
        return .immediate(respond(method: method, path: path, query: query))
    }

    /// Routes one request to the fixed routes (no I/O): the answer for `method` and `path`, with
    /// `query` looking up a query parameter.
    public func respond(method: String, path: String, query: (String) -> String?) -> AdminResponse {
        let isRead = method == "GET" || method == "HEAD"
        switch path {
        case "/metrics":
            guard isRead else { return Self.methodNotAllowed(method, path) }
            return AdminResponse(status: 200, contentType: AdminResponse.prometheusText, body: metrics())
        case "/healthz", "/livez":
            guard isRead else { return Self.methodNotAllowed(method, path) }
            let report = liveness()
            return AdminResponse(status: report.httpStatus, body: report.text)
        case "/readyz":
            guard isRead else { return Self.methodNotAllowed(method, path) }
            let report = readiness()
            return AdminResponse(status: report.httpStatus, body: report.text)
        case _ where path.hasPrefix("/debug/"):
            guard let hook = testHooks[String(path.dropFirst("/debug/".count))] else {
                return AdminResponse(status: 404, body: "no test hook \(path) (enable with PUSH_ADMIN_TEST_HOOKS=1)\n")
            }
            guard method == "POST" else { return Self.methodNotAllowed(method, path) }
            return hook(query)
        default:
            return AdminResponse(status: 404, body: "not found: \(path) (try /metrics, /healthz, /readyz)\n")
        }
    }

    private static func methodNotAllowed(_ method: String, _ path: String) -> AdminResponse {
        AdminResponse(status: 405, body: "\(method) not allowed on \(path)\n")
    }
}
