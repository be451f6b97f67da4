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

    /// - Parameters: see the properties.
    public init(metrics: @escaping @Sendable () -> String, liveness: @escaping @Sendable () -> ProbeReport,
                readiness: @escaping @Sendable () -> ProbeReport,
                testHooks: [String: @Sendable (_ query: (String) -> String?) -> AdminResponse] = [:]) {
        self.metrics = metrics
        self.liveness = liveness
        self.readiness = readiness
        self.testHooks = testHooks
    }

    /// Routes one request (no I/O): the answer for `method` and `path`, with `query` looking up a
    /// query parameter.
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
