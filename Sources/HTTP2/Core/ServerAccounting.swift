import ServiceCore
import Synchronization

/// Counts one server's limit breaches and connections, in its own tally and in the metrics registry
/// (`push_http2_server_limit_breaches_total{limit}`, `push_http2_server_connections`), and logs
/// breaches at most once per limit every 10 seconds with the number of lines held back
/// (docs/http2-server-limits.md).
final class ServerAccounting: Sendable {
    private let logger: Logger
    private let state = Mutex(State())
    private let breachCounter: Counter
    private let connectionGauge: Gauge

    private struct State {
        var breaches: [HTTP2ServerLimit: Int] = [:]
        var log = LogRateLimiter(interval: .seconds(10))
    }

    init(logger: Logger, metrics: MetricsRegistry) {
        self.logger = logger
        breachCounter = metrics.counter(
            "push_http2_server_limit_breaches_total", help: "HTTP/2 server limits reached, by limit (docs/http2-server-limits.md).",
            labelNames: ["limit"])
        connectionGauge = metrics.gauge(
            "push_http2_server_connections", help: "HTTP/2 server connections held, TLS handshakes and closing ones included.")
    }

    /// Counts a breach of `limit` by the peer at `remote` and logs it unless a line for `limit` was
    /// written less than 10 seconds ago.
    func breach(_ limit: HTTP2ServerLimit, _ message: @autoclosure () -> String, remote: String) {
        let suppressed = state.withLock { state -> Int? in
            state.breaches[limit, default: 0] += 1
            return state.log.admit(limit.rawValue, now: .now)
        }
        breachCounter.increment(labels: [limit.rawValue])
        guard let suppressed else { return }
        logger.warning("HTTP/2 server limit reached", [
            "limit": limit.rawValue, "detail": message(), "remote": remote, "suppressed_since_last": String(suppressed),
        ])
    }

    func connectionOpened() {
        connectionGauge.increment()
    }

    func connectionClosed() {
        connectionGauge.decrement()
    }

    /// Breaches by limit since the server started.
    var breaches: [HTTP2ServerLimit: Int] { state.withLock { $0.breaches } }
}
