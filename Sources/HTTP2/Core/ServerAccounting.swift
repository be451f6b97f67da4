import ServiceCore
import Synchronization

/// Counts one server's limit breaches and connections, and logs breaches at most once per limit
/// every 10 seconds with the number of lines held back (docs/http2-server-limits.md).
final class ServerAccounting: Sendable {
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var breaches: [HTTP2ServerLimit: Int] = [:]
        var connections = 0
        var log = LogRateLimiter(interval: .seconds(10))
    }

    init(logger: Logger) {
        self.logger = logger
    }

    /// Counts a breach of `limit` by the peer at `remote` and logs it unless a line for `limit` was
    /// written less than 10 seconds ago.
    func breach(_ limit: HTTP2ServerLimit, _ message: @autoclosure () -> String, remote: String) {
        let suppressed = state.withLock { state -> Int? in
            state.breaches[limit, default: 0] += 1
            return state.log.admit(limit.rawValue, now: .now)
        }
        guard let suppressed else { return }
        logger.warning("HTTP/2 server limit reached", [
            "limit": limit.rawValue, "detail": message(), "remote": remote, "suppressed_since_last": String(suppressed),
        ])
    }

    func connectionOpened() {
        state.withLock { $0.connections += 1 }
    }

    func connectionClosed() {
        state.withLock { $0.connections -= 1 }
    }

    /// Breaches by limit since the server started.
    var breaches: [HTTP2ServerLimit: Int] { state.withLock { $0.breaches } }
}
