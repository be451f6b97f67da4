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
        /// Per request: its acknowledged tokens and the sequence number of its first insertion.
        var tokens: [String: (sequence: Int, tokens: Set<String>)] = [:]
        /// (request id, sequence) oldest first from `head`; an entry whose request was removed (or
        /// inserted again later, with a new sequence) is skipped when met and dropped by `compact`.
        /// Removing a request is O(1): the request's entry in `order` goes stale.
        var order: [(id: String, sequence: Int)] = []
        var head = 0
        var nextSequence = 0
        var count = 0

        /// Drops stale entries once they outnumber live requests, so `order` stays within about
        /// twice the requests remembered (amortized O(1) per removal).
        mutating func compact() {
            guard order.count - head > 2 * tokens.count + 64 else { return }
            order = order[head...].filter { tokens[$0.id]?.sequence == $0.sequence }
            head = 0
        }
    }

    /// The key under which a request's own `RequestCompleted` is remembered (no device token is empty).
    static let requestCompleted = ""

    private let state = Mutex(State())
    /// Most reports remembered at once.
    let maxReports: Int

    /// - Parameter maxReports: most (request, token) pairs kept (default 200,000, about 20 MB at worst:
    ///   a campaign of 1,000,000 tokens held 100 MB more at its end with 1,000,000, `bench-campaign`).
    init(maxReports: Int = 200_000) {
        self.maxReports = max(1, maxReports)
    }

    /// Remembers that the report of (`requestID`, `token`) was acknowledged.
    func insert(requestID: String, token: String) {
        state.withLock { state in
            // One look-up of the request (a report per notification): its entry is made in place
            // when missing, and told apart by its sequence, which no existing entry has yet.
            let next = state.nextSequence
            let (fresh, inserted) = Self.insert(token, into: &state.tokens[requestID, default: (next, [])], next: next)
            if fresh {
                state.order.append((requestID, next))
                state.nextSequence += 1
            }
            if inserted { state.count += 1 }
            while state.count > maxReports, state.head < state.order.count {
                let oldest = state.order[state.head]
                state.head += 1
                if let entry = state.tokens[oldest.id], entry.sequence == oldest.sequence {
                    state.tokens[oldest.id] = nil
                    state.count -= entry.tokens.count
                }
            }
            state.compact()
        }
    }

    /// Whether the report of (`requestID`, `token`) was acknowledged and is still remembered.
    /// Adds `token` to a request's entry; says whether the entry was just made (its sequence is
    /// `next`) and whether the token is new to it.
    private static func insert(_ token: String, into entry: inout (sequence: Int, tokens: Set<String>), next: Int) -> (fresh: Bool, inserted: Bool) {
        (entry.sequence == next, entry.tokens.insert(token).inserted)
    }

    func contains(requestID: String, token: String) -> Bool {
        state.withLock { $0.tokens[requestID]?.tokens.contains(token) ?? false }
    }

    /// Forgets a request (it finished, and its completion is recorded durably).
    func remove(requestID: String) {
        state.withLock { state in
            guard let entry = state.tokens.removeValue(forKey: requestID) else { return }
            state.count -= entry.tokens.count
            state.compact()
        }
    }

    /// Reports remembered now.
    var count: Int { state.withLock { $0.count } }

    /// Entries of the eviction order kept now, stale ones included (tests: it stays proportional to
    /// the requests remembered).
    var orderLength: Int { state.withLock { $0.order.count - $0.head } }
}
