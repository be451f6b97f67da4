import Synchronization

/// The delivery reports of unfinished requests that Kafka acknowledged in this process, so that
/// handling a request again here (a retry after PostgreSQL or Kafka failed, the partition lost and
/// assigned back after a broker outage) does not publish them a second time. `send_log.acknowledged`
/// is the durable form, written only when a request is abandoned gracefully; this set covers the
/// failures that leave no time for a write.
///
/// Bounded: past `maxReports` reports the requests remembered longest are forgotten first (their
/// reports would then be published again on a redelivery: a repeat, never a loss).
final class AcknowledgedReports: Sendable {
    private struct State {
        var tokens: [String: Set<String>] = [:]
        /// Request ids, oldest first (a request's position is its first insertion).
        var order: [String] = []
        var count = 0
    }

    /// The key under which a request's own `RequestCompleted` is remembered (no device token is empty).
    static let requestCompleted = ""

    private let state = Mutex(State())
    /// Most reports remembered at once.
    let maxReports: Int

    /// - Parameter maxReports: most (request, token) pairs kept (default 1,000,000, about 100 MB at worst).
    init(maxReports: Int = 1_000_000) {
        self.maxReports = max(1, maxReports)
    }

    /// Remembers that the report of (`requestID`, `token`) was acknowledged.
    func insert(requestID: String, token: String) {
        state.withLock { state in
            if state.tokens[requestID] == nil { state.order.append(requestID) }
            if state.tokens[requestID, default: []].insert(token).inserted { state.count += 1 }
            while state.count > maxReports, let oldest = state.order.first {
                state.order.removeFirst()
                state.count -= state.tokens.removeValue(forKey: oldest)?.count ?? 0
            }
        }
    }

    /// Whether the report of (`requestID`, `token`) was acknowledged and is still remembered.
    func contains(requestID: String, token: String) -> Bool {
        state.withLock { $0.tokens[requestID]?.contains(token) ?? false }
    }

    /// Forgets a request (it finished, and its completion is recorded durably).
    func remove(requestID: String) {
        state.withLock { state in
            guard let tokens = state.tokens.removeValue(forKey: requestID) else { return }
            state.count -= tokens.count
            state.order.removeAll { $0 == requestID }
        }
    }

    /// Reports remembered now.
    var count: Int { state.withLock { $0.count } }
}
