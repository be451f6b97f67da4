import ServiceCore
import Synchronization

/// What one `APNsClient` counts: the agreed `push_apns_*` families in a ServiceCore `MetricsRegistry`
/// (the process's `MetricsRegistry.shared` unless the client was given another), plus a per-client
/// snapshot of finer counters that tests and status pages read with ``snapshot()``.
///
/// Registry families (docs/apns-client.md "Metrics"):
/// `push_apns_requests_total{bundle_id,push_type,status,reason}` (every attempt; `status` is the HTTP
/// status or `none`, `reason` Apple's reason, `timeout` or `connection_error` without an answer, empty on
/// 200), `push_apns_request_duration_seconds{push_type}`, `push_apns_connections{environment}`,
/// `push_apns_active_streams{environment}`, `push_apns_ping_failures_total{environment}`,
/// `push_apns_connections_retired_total{environment,cause}`, `push_apns_jwt_mints_total` (counted by
/// `APNsProviderTokenCache`), `push_apns_retries_total{reason}` (``APNsRetryReason/metricLabel``, or
/// `unprocessed`, `new_connection`, `provider_token_renewed` for immediate resends),
/// `push_apns_circuit_state{environment}` (0 closed, 1 half-open, 2 open),
/// `push_apns_provider_token_faults_total{reason,key_id}` (`key_id` `certificate` for a certificate pool), `push_apns_device_gates` (entries of the per-device
/// gate map), `push_apns_gated_device_tokens` (device tokens whose gate is closed or has someone in it)
/// and `push_apns_key_fallbacks_total{key_id}` (sends that went to the fallback key, by the refused key),
/// `push_apns_channel_requests_total{request,environment,status,reason}` (every channel-management and
/// broadcast attempt: `request` create, read, delete, list or broadcast; `status` `none` and `reason`
/// `no_answer` when the answer was lost).
///
/// Snapshot names: `requests`, `attempts`, `retries`, `unprocessed_resends`, `timeouts`,
/// `connection_errors`, `no_connection`, `connections_opened`, `connect_failures`, `dns_lookups`,
/// `goaways`, `pings`, `ping_failures`, `connections_retired`, `queue_full`,
/// `provider_token_updates_refused`, `expired_provider_tokens`, `jwt_renewals`,
/// `provider_token_faults_<Reason>`, `unknown_reasons`, `alerts`, `provider_token_changes`,
/// `certificates_expiring`, `certificate_seconds_left_<UID>`, `circuit_open`, `circuit_halfOpen`,
/// `circuit_closed`, `circuit_trials_abandoned`, `device_gate_waits`, `device_gate_closings`, `status_<code>` and `reason_<Reason>`.
public final class APNsClientMetrics: Sendable {
    private let counters = Mutex<[String: Int]>([:])
    private let hot = HotCounters()
    /// The registry the families live in.
    public let registry: MetricsRegistry
    let requestsTotal: Counter
    let requestDuration: Histogram
    let connections: Gauge
    let activeStreams: Gauge
    let pingFailures: Counter
    let connectionsRetired: Counter
    let retriesTotal: Counter
    let circuitState: Gauge
    let providerTokenFaults: Counter
    let deviceGates: Gauge
    let gatedDeviceTokens: Gauge
    let keyFallbacks: Counter
    let channelRequests: Counter

    private final class HotCounters: Sendable {
        let requests = Atomic<Int>(0)
        let attempts = Atomic<Int>(0)
        let ok = Atomic<Int>(0)
    }

    init(registry: MetricsRegistry) {
        self.registry = registry
        requestsTotal = registry.counter(
            "push_apns_requests_total", help: "APNs attempts by answer (status none: no answer)",
            labelNames: ["bundle_id", "push_type", "status", "reason"])
        requestDuration = registry.histogram(
            "push_apns_request_duration_seconds", help: "Duration of one APNs attempt, waiting for a stream included",
            labelNames: ["push_type"], buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30])
        connections = registry.gauge("push_apns_connections", help: "Open APNs connections", labelNames: ["environment"])
        activeStreams = registry.gauge("push_apns_active_streams", help: "APNs streams in flight", labelNames: ["environment"])
        pingFailures = registry.counter(
            "push_apns_ping_failures_total", help: "PINGs not acknowledged in time (the connection was closed)", labelNames: ["environment"])
        connectionsRetired = registry.counter(
            "push_apns_connections_retired_total", help: "APNs connections taken out of service", labelNames: ["environment", "cause"])
        retriesTotal = registry.counter("push_apns_retries_total", help: "APNs sends repeated, by why", labelNames: ["reason"])
        circuitState = registry.gauge(
            "push_apns_circuit_state", help: "APNs circuit breaker: 0 closed, 1 half-open, 2 open", labelNames: ["environment"])
        providerTokenFaults = registry.counter(
            "push_apns_provider_token_faults_total", help: "Provider-token faults (our credentials or clock, never the device), by Apple's reason and key id",
            labelNames: ["reason", "key_id"])
        deviceGates = registry.gauge("push_apns_device_gates", help: "Device tokens in the per-device gate map (bounded, least recently used evicted)")
        keyFallbacks = registry.counter(
            "push_apns_key_fallbacks_total", help: "Sends that went to the fallback key because APNs refused the key being rotated in",
            labelNames: ["key_id"])
        channelRequests = registry.counter(
            "push_apns_channel_requests_total", help: "APNs channel-management and broadcast attempts by answer (status none: no answer)",
            labelNames: ["request", "environment", "status", "reason"])
        gatedDeviceTokens = registry.gauge(
            "push_apns_gated_device_tokens", help: "Device tokens whose notifications go one at a time behind a backoff (429 TooManyRequests, stream timeouts)")
    }

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
