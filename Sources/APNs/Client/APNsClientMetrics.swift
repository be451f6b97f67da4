import Synchronization

/// Counters of one `APNsClient`, for dashboards and alerts. Read with ``snapshot()``.
///
/// Names (stable, used as metric names): `requests`, `attempts`, `retries`, `unprocessed_resends`
/// (streams above a GOAWAY's last-stream-id or refused, sent again without counting as a failure),
/// `timeouts`, `connection_errors` (dropped connections and resets while a request was in flight),
/// `connections_opened`, `connect_failures`, `dns_lookups`, `goaways`, `pings`, `ping_failures`,
/// `connections_retired`, `queue_full`, `provider_token_updates_refused` (429
/// TooManyProviderTokenUpdates: an **alert**, it is our bug), `expired_provider_tokens`,
/// `unknown_reasons` (an **alert**), `alerts` (every alert-raising answer, see
/// `APNsReason.raisesAlert`), `provider_token_changes` (JWT switches on existing connections),
/// `certificates_expiring` (certificates inside the warning window at the last check),
/// `certificate_seconds_left_<UID>` (a gauge: seconds until the certificate's `notAfter`), and
/// `status_<code>` / `reason_<Reason>` per answer.
public final class APNsClientMetrics: Sendable {
    private let counters = Mutex<[String: Int]>([:])
    private let hot = HotCounters()

    private final class HotCounters: Sendable {
        let requests = Atomic<Int>(0)
        let attempts = Atomic<Int>(0)
        let ok = Atomic<Int>(0)
    }

    init() {}

    func increment(_ name: String, by amount: Int = 1) {
        counters.withLock { $0[name, default: 0] += amount }
    }

    func set(_ name: String, _ value: Int) {
        counters.withLock { $0[name] = value }
    }

    func countRequest() { hot.requests.add(1, ordering: .relaxed) }

    func countAttempt(status: Int?) {
        hot.attempts.add(1, ordering: .relaxed)
        if status == 200 { hot.ok.add(1, ordering: .relaxed) }
    }

    /// Every counter by name (missing names are 0).
    public func snapshot() -> [String: Int] {
        var values = counters.withLock { $0 }
        values["requests"] = hot.requests.load(ordering: .relaxed)
        values["attempts"] = hot.attempts.load(ordering: .relaxed)
        values["status_200"] = hot.ok.load(ordering: .relaxed)
        return values
    }

    /// One counter (0 when never incremented).
    public subscript(name: String) -> Int { snapshot()[name] ?? 0 }
}
