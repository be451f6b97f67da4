import Foundation
import HTTP2
import PushDomain
import ServiceCore
import Synchronization

/// Sends device pushes (`POST /3/device/…`) to APNs over HTTP/2 + TLS through self-healing
/// connection pools, and retries what Apple's rules say to retry.
///
/// **Pools.** One pool per (credentials, environment): several apps and teams share one client,
/// each bundle ID mapped to its credentials (token or certificate). A pool keeps
/// `connectionsPerPool` connections, opened staggered by `connectStagger`, each after its own
/// uncached DNS look-up on a thread of its own; TLS 1.2+ with ALPN `h2` and the server verified.
/// It never has more streams open on a connection than the server's current
/// SETTINGS_MAX_CONCURRENT_STREAMS, and a new token-auth connection sends one request before it fans
/// out (docs/apns-protocol.md §6). Callers beyond capacity wait in a bounded FIFO (back-pressure);
/// beyond `maxQueuedRequests` waiting callers, `send` fails at once with `.tooManyQueuedRequests`.
/// GOAWAY, a drop, a failed PING (idle connections are pinged every `idlePingInterval`) or a
/// retirement replaces the connection; failed opens back off exponentially with jitter.
///
/// **Provider tokens** (§4). One JWT per (team, key), shared by every connection; a connection
/// takes the current JWT only when it is at most 30 minutes old, keeps it at least 20 minutes, and
/// moves to the successor once its own is 45 minutes old, so no connection changes JWT more than
/// once per 20 minutes and none sends a JWT older than an hour.
///
/// **Retries** (docs/semantics.md "Retries follow the reason"; reference §3 is normative):
/// - streams APNs did not process (above a GOAWAY's last-stream-id, REFUSED_STREAM, or the
///   connection went away before sending) are sent again at once on another connection and are not
///   attempts;
/// - 500, 503 `ServiceUnavailable`, a dropped connection, a reset and a timed-out stream (reset with
///   RST_STREAM(CANCEL)) retry with exponential backoff and jitter, never past the notification's
///   `apns-expiration`, at most `retry.maxAttempts` attempts;
/// - 503 `Shutdown` and 400 `IdleTimeout` retire the connection and retry on another one;
/// - 403 `ExpiredProviderToken` invalidates the JWT, retires the connection and retries once;
/// - 429 `TooManyProviderTokenUpdates` keeps the JWT, retries after `retry.providerTokenUpdateDelay`
///   and counts the alert metric `provider_token_updates_refused`;
/// - 429 `TooManyRequests` and a timed-out stream close that device token's gate
///   (``APNsDeviceGates``): its notifications go one at a time behind one growing backoff;
/// - every other 4xx and unknown reasons (metric `unknown_reasons`) are final at once.
public final class APNsClient: Sendable {
    /// Where the client connects and how.
    public struct Configuration: Sendable {
        /// An APNs endpoint: host and TCP port.
        public struct Endpoint: Sendable, Hashable {
            public var host: String
            public var port: Int
            public init(host: String, port: Int) {
                self.host = host
                self.port = port
            }

            /// Parses `https://host:port` (port defaults to 443).
            /// - Throws: `APNsError` `.invalidConfiguration` naming the URL when it cannot be parsed.
            public init(url: String) throws(APNsError) {
                guard let components = URLComponents(string: url), components.scheme == "https",
                      let host = components.host, !host.isEmpty
                else { throw APNsError(code: .invalidConfiguration, message: "APNs URL \"\(url)\" is not https://host[:port]") }
                self.init(host: host, port: components.port ?? 443)
            }

            /// `:authority`: the host, plus `:port` unless it is 443.
            var authority: String {
                let hostPart = host.contains(":") ? "[\(host)]" : host
                return port == 443 ? hostPart : "\(hostPart):\(port)"
            }
        }

        /// Exponential backoff with jitter: the n-th delay is `initial × 2^(n-1)`, capped at
        /// `maximum`, then multiplied by a random factor in 0.5…1.0.
        public struct Backoff: Sendable, Hashable {
            /// The first delay.
            public var initial: Duration
            /// The largest delay.
            public var maximum: Duration

            /// Creates a backoff.
            public init(initial: Duration, maximum: Duration) {
                self.initial = initial
                self.maximum = maximum
            }

            /// The delay after `failures` consecutive failures (1 = the first).
            public func delay(afterFailures failures: Int) -> Duration {
                delay(afterFailures: failures, random: Double.random(in: 0.5...1.0))
            }

            /// The delay after `failures` consecutive failures with the jitter factor `random`
            /// (0.5…1.0; injected so that the decision can be tested).
            public func delay(afterFailures failures: Int, random: Double) -> Duration {
                let exponent = min(max(failures - 1, 0), 30)
                var base = initial * (1 << exponent)
                if base > maximum || base < .zero { base = maximum }
                return base * min(max(random, 0), 1)
            }
        }

        /// Retry limits.
        public struct RetryPolicy: Sendable, Hashable {
            /// Backoff after 500, 503 `ServiceUnavailable`, drops, resets and timeouts.
            /// Default 200 ms doubling to 30 s.
            public var backoff = Backoff(initial: .milliseconds(200), maximum: .seconds(30))
            /// First hold-back of a device token after 429 `TooManyRequests`; doubles per strike up
            /// to `backoff.maximum`. Default 1 s.
            public var tooManyRequestsDelay: Duration = .seconds(1)
            /// Wait before retrying after 429 `TooManyProviderTokenUpdates`. Default 5 s.
            public var providerTokenUpdateDelay: Duration = .seconds(5)
            /// Most resends of streams APNs did not process (GOAWAY), per notification. Default 100.
            public var maxUnprocessedResends: Int = 100

            /// The defaults listed on each property.
            public init() {}
        }

        /// `api.push.apple.com:443` unless overridden (docs/apns-protocol.md §1).
        public var production = Endpoint(host: APNsEnvironment.production.host, port: 443)
        /// `api.sandbox.push.apple.com:443` unless overridden.
        public var sandbox = Endpoint(host: APNsEnvironment.sandbox.host, port: 443)
        /// Channel management in production (docs/apns-protocol.md §8, `PUSH_APNS_CHANNELS_URL_PRODUCTION`):
        /// `api-manage-broadcast.push.apple.com:2196` unless overridden.
        public var channelsProduction = Endpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)
        /// Channel management in development (`PUSH_APNS_CHANNELS_URL_SANDBOX`):
        /// `api-manage-broadcast.sandbox.push.apple.com:2195` unless overridden.
        public var channelsSandbox = Endpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)
        /// Broadcast sends in production (§8, `PUSH_APNS_BROADCAST_URL_PRODUCTION`):
        /// `api-broadcast.push.apple.com:443` unless overridden (Apple's pages also name `api.push.apple.com`).
        public var broadcastProduction = Endpoint(host: "api-broadcast.push.apple.com", port: 443)
        /// Broadcast sends in development (`PUSH_APNS_BROADCAST_URL_SANDBOX`):
        /// `api-broadcast.sandbox.push.apple.com:443` unless overridden.
        public var broadcastSandbox = Endpoint(host: "api-broadcast.sandbox.push.apple.com", port: 443)
        /// PEM file of CA certificates to trust; nil uses the system trust store.
        public var caFile: String?
        /// How long one request may wait for its answer before its stream is reset and retried.
        /// Default 30 s.
        public var requestTimeout: Duration = .seconds(30)
        /// How long connecting (DNS excluded; TCP + TLS + first SETTINGS) may take. Default 10 s.
        public var connectTimeout: Duration = .seconds(10)
        /// Connections per (credentials, environment) pool. Default 4.
        public var connectionsPerPool: Int = 4
        /// Delay between the opens of a pool's connections (the n-th opens after n × this).
        /// Default 2 s (an Apple engineer: "stagger connection opens by a few seconds").
        public var connectStagger: Duration = .seconds(2)
        /// Callers that may wait for a free stream per pool before `send` fails with
        /// `.tooManyQueuedRequests`. Default 10,000.
        public var maxQueuedRequests: Int = 10_000
        /// Optional cap on streams per connection below the server's SETTINGS_MAX_CONCURRENT_STREAMS
        /// (docs/semantics.md "Per-connection rate"). Default nil (the server's value).
        public var maxStreamsPerConnection: Int?
        /// Optional cap on requests started per second on each connection (token bucket, bursts
        /// up to one second's worth; docs/semantics.md "Per-connection rate"). Default nil (no cap).
        public var maxRequestsPerSecondPerConnection: Int?
        /// A connection without traffic for this long gets an HTTP/2 PING. Default 60 s.
        public var idlePingInterval: Duration = .seconds(60)
        /// A PING not acknowledged within this replaces the connection. Default 10 s.
        public var pingTimeout: Duration = .seconds(10)
        /// How often pools look for idle connections. Default 5 s.
        public var healthCheckInterval: Duration = .seconds(5)
        /// Backoff between failed connection opens. Default 100 ms doubling to 30 s.
        public var reconnectBackoff = Backoff(initial: .milliseconds(100), maximum: .seconds(30))
        /// Retry limits.
        public var retry = RetryPolicy()
        /// The circuit breaker of each (credentials, environment) pool.
        public var circuitBreaker = APNsCircuitBreaker.Policy()
        /// Most device tokens the per-device gate map keeps (``APNsDeviceGates``; least recently used
        /// evicted). Its backoff is `retry.tooManyRequestsDelay` doubling to `retry.backoff.maximum`.
        /// Default 100,000.
        public var deviceGateCapacity: Int = 100_000
        /// How long transient failures are retried (`PUSH_APNS_RETRY_HORIZON_IMMEDIATE_MS`,
        /// `PUSH_APNS_RETRY_HORIZON_MS`).
        public var retryHorizon = APNsRetryHorizon()
        /// Warn (log and metric `certificates_expiring`) when a provider certificate expires within
        /// this. Default 30 days.
        public var certificateExpiryWarning: Duration = .seconds(30 * 86_400)
        /// A pool without a send for this long closes its connections; the next send reopens them.
        /// Zero never closes. Default 30 minutes.
        public var idleCloseAfter: Duration = .seconds(30 * 60)
        /// After a key being rotated in was refused for a bundle ID (``APNsKeyFallbacks``), how long
        /// that bundle ID's sends go straight to the fallback key before the new key is tried again.
        /// Default 60 s.
        public var keyRetryDelay: Duration = .seconds(60)
        /// Wall clock for expirations and certificate checks.
        public var clock: any WallClock = SystemWallClock()

        public init() {}

        func endpoint(for environment: APNsEnvironment) -> Endpoint {
            environment == .production ? production : sandbox
        }

        /// The endpoint of `service` in `environment`.
        func endpoint(for environment: APNsEnvironment, service: APNsService) -> Endpoint {
            switch service {
            case .push: endpoint(for: environment)
            case .channels: environment == .production ? channelsProduction : channelsSandbox
            case .broadcast: environment == .production ? broadcastProduction : broadcastSandbox
            }
        }
    }

    private struct PoolKey: Hashable {
        let credentials: ObjectIdentifier
        let environment: APNsEnvironment
        let service: APNsService
    }

    let configuration: Configuration
    let credentialChoice: APNsCredentialChoice
    private let pools = Mutex<[PoolKey: APNsConnectionPool]>([:])
    let gates: APNsDeviceGateKeeper
    let logger: Logger
    /// Keys being rotated in that APNs refused, per bundle ID (docs/apns-client.md "Key rotation").
    let keyFallbacks: Mutex<APNsKeyFallbacks>
    /// Counters for dashboards and alerts (the registry's `push_apns_*` families and a snapshot).
    public let metrics: APNsClientMetrics

    /// Creates a client that signs every request with `tokens`' key (one team for every bundle ID).
    /// - Parameter metrics: where the `push_apns_*` families are counted; default the process's registry.
    public convenience init(configuration: Configuration, tokens: APNsProviderTokenCache, logger: Logger = Logger(label: "apns.client"),
                            metrics: MetricsRegistry = .shared) {
        self.init(configuration: configuration, credentials: [:], defaultCredentials: .token(tokens), logger: logger, metrics: metrics)
    }

    /// Creates a client for several apps and teams.
    /// - Parameters:
    ///   - credentials: credentials per bundle ID (the topic without its push-type suffix; for
    ///     `mdm`, the certificate's topic).
    ///   - defaultCredentials: for bundle IDs not in `credentials`; nil refuses them.
    ///   - logger: where the client logs.
    ///   - metrics: where the `push_apns_*` families are counted; default the process's registry.
    public init(
        configuration: Configuration, credentials: [String: APNsCredentials], defaultCredentials: APNsCredentials? = nil,
        logger: Logger = Logger(label: "apns.client"), metrics: MetricsRegistry = .shared
    ) {
        self.metrics = APNsClientMetrics(registry: metrics)
        var gatePolicy = APNsDeviceGates.Policy()
        gatePolicy.backoff = .init(initial: configuration.retry.tooManyRequestsDelay,
                                   maximum: max(configuration.retry.backoff.maximum, configuration.retry.tooManyRequestsDelay))
        gatePolicy.capacity = configuration.deviceGateCapacity
        self.gates = APNsDeviceGateKeeper(policy: gatePolicy, metrics: self.metrics, now: APNsConnectionPool.monotonicMilliseconds)
        self.configuration = configuration
        self.credentialChoice = APNsCredentialChoice(byBundleID: credentials, defaultCredentials: defaultCredentials)
        self.keyFallbacks = Mutex(APNsKeyFallbacks(retryDelay: configuration.keyRetryDelay))
        self.logger = logger
    }

    /// Sends one notification, retrying as the type's documentation says, and returns Apple's
    /// final answer with ``APNsResponse/attempts``. A returned response whose `action` still retries
    /// means the client gave up (attempts or expiration exhausted).
    ///
    /// Call `APNsNotificationValidator.validate(_:)` first: this method sends what it is given.
    /// Waits while every stream of the pool is busy.
    /// - Throws: `APNsError`: `.missingCredentials`; `.signingFailed`; `.tooManyQueuedRequests`
    ///   (back-pressure, nothing sent); `.deliveryFailed` with `attempts` and the last `HTTP2Error`
    ///   as `cause` when no answer came within the retry rules; `.shutDown`. `CancellationError`.
    public func send(_ request: APNsRequest, environment: APNsEnvironment) async throws -> APNsResponse {
        try await send(request, environment: environment, options: APNsSendOptions())
    }

    /// The last instant an attempt of `request` may start when first handed to the client at `now`
    /// (default: the client's clock): see ``APNsRetryHorizon``. The dispatcher stores it with a
    /// parked retry and passes it back as ``APNsSendOptions/retryDeadline``.
    public func retryDeadline(for request: APNsRequest, now: Date? = nil) -> Date {
        let now = now ?? Date(timeIntervalSince1970: TimeInterval(configuration.clock.nowMilliseconds()) / 1000)
        return configuration.retryHorizon.deadline(for: request, now: now)
    }

    /// After 403 `ExpiredProviderToken`: mints (single-flight) the token the retry carries and retires
    /// the connections sending the refused one. False when renewing cannot help (the server's clock is
    /// so far ahead that a fresh token looks expired too, or a renewed token was refused already):
    /// a provider fault, reported by the caller's stop.
    func renewProviderToken(_ rejected: APNsJWT, cache: APNsProviderTokenCache, response: APNsResponse, pool: APNsConnectionPool) -> Bool {
        if let date = response.date, date - cache.nowSeconds >= Self.futileSkewSeconds {
            providerTokenFault(.expiredProviderToken, response: response, jwt: rejected, pool: pool)
            return false
        }
        let before = cache.mintCount
        guard let renewed = (try? cache.renew(replacing: rejected)) ?? nil else {
            providerTokenFault(.expiredProviderToken, response: response, jwt: rejected, pool: pool)
            return false
        }
        if cache.mintCount != before {
            metrics.increment("jwt_renewals")
            logger.warning("APNs answered ExpiredProviderToken: a new JWT was minted for new connections", [
                "key_id": cache.keyID, "team_id": cache.teamID, "rejected_iat": "\(rejected.issuedAt)", "new_iat": "\(renewed.issuedAt)",
            ])
        }
        pool.retireConnections(using: rejected)
        return true
    }

    /// A server clock this far ahead of ours (seconds) makes even a fresh JWT look expired: 55 minutes.
    static let futileSkewSeconds: Int64 = 55 * 60

    /// Counts a provider-token fault and logs it at most once a minute per reason with its likely cause.
    func providerTokenFault(_ reason: APNsReason, response: APNsResponse, jwt: APNsJWT?, pool: APNsConnectionPool) {
        metrics.increment("provider_token_faults_\(reason.rawValue)")
        // The key, never the key material: which of the registry's keys Apple refuses.
        metrics.providerTokenFaults.increment(labels: [reason.rawValue, pool.credentials.providerTokens?.keyID ?? "certificate"])
        pool.credentials.providerTokens?.noteRefusal(reason.rawValue)
        let nowSeconds = configuration.clock.nowSeconds()
        let skew = response.date.map { $0 - nowSeconds }
        if let skew { metrics.set("provider_token_fault_skew_s", Int(skew)) }
        guard providerTokenFaultLog.withLock({ $0.admit(reason.rawValue, now: .now) }) != nil else { return }
        metrics.increment("provider_token_fault_log_lines")
        var fields = ["reason": reason.rawValue, "status": "\(response.status)", "pool": "\(pool.credentials.label)/\(pool.environment)"]
        if let cache = pool.credentials.providerTokens {
            fields["key_id"] = cache.keyID
            fields["team_id"] = cache.teamID
        }
        if let jwt { fields["jwt_iat"] = "\(jwt.issuedAt)" }
        if let skew { fields["server_clock_skew_s"] = "\(skew)" }
        logger.error("APNs refused our provider token: \(Self.providerTokenFaultCause(reason, skewSeconds: skew)); device tokens are untouched", fields)
    }

    /// The likely cause of a provider-token fault, in the words of its log line (docs/apns-client.md
    /// "Provider tokens").
    /// - Parameters:
    ///   - reason: Apple's reason.
    ///   - skew: the server's clock minus ours in seconds (from the response's `date` header), if known.
    public static func providerTokenFaultCause(_ reason: APNsReason, skewSeconds skew: Int64?) -> String {
        let clock: String
        if let skew, abs(skew) >= 60 {
            clock = "the server's clock is \(abs(skew)) s \(skew > 0 ? "ahead of" : "behind") ours (its date header): fix the clock (NTP)"
        } else if skew != nil {
            clock = "the clocks agree within a minute (date header)"
        } else {
            clock = "no date header to compare clocks"
        }
        switch reason {
        case .expiredProviderToken:
            return "a freshly minted JWT was refused as expired, so its iat looks over an hour old to APNs; \(clock)"
        case .invalidProviderToken:
            return "the JWT does not verify: a wrong key id (kid) or team id (iss) for this .p8 key, a revoked key, or an iat far off; \(clock)"
        case .tooManyProviderTokenUpdates:
            return "a connection changed its JWT more than once in 20 minutes (the JWT is kept; retried later)"
        case .missingProviderToken:
            return "no authorization header was sent on a token-auth connection"
        case .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken:
            return "the key does not belong to this connection's team or environment"
        default:
            return "the provider credentials were refused (\(reason.rawValue))"
        }
    }

    private let providerTokenFaultLog = Mutex(LogRateLimiter(interval: .seconds(60)))

    /// The keys being rotated in that APNs refused and whose bundle IDs' sends now go to the key before
    /// them, oldest first, with when, why and when they are tried again (readiness detail; never a key).
    public func keysInFallback() -> [APNsKeyFallbacks.Refusal] {
        keyFallbacks.withLock { $0.refusals }
    }

    /// Closes every pool: waiting callers fail with `.shutDown`, open streams finish.
    public func shutdown() async {
        let all = pools.withLock { pools in
            defer { pools.removeAll() }
            return Array(pools.values)
        }
        for pool in all { await pool.shutdown() }
    }

    /// Closes the pools of `credentials` (every environment) gracefully: taken out of use at once (a
    /// later send on these credentials would open a new pool), each closes once every send holding it
    /// has finished, retries included: no new notification goes out on them, none in flight is lost,
    /// and their connections end with GOAWAY. Returns when they are closed (cancellation closes them
    /// at once, open streams still finishing). For credentials removed from the dispatcher's
    /// credentials file (docs/apns-client.md "Key rotation").
    /// - Returns: how many pools were drained (0 when the credentials had none).
    @discardableResult
    public func drain(_ credentials: APNsCredentials) async -> Int {
        let identity = credentials.identity
        let drained = pools.withLock { pools -> [APNsConnectionPool] in
            let keys = pools.keys.filter { $0.credentials == identity }
            return keys.compactMap { pools.removeValue(forKey: $0) }
        }
        await withTaskGroup(of: Void.self) { group in
            for pool in drained { group.addTask { await pool.drain() } }
        }
        return drained.count
    }

    // MARK: Helpers

    /// The pool of (`credentials`, `environment`) for `service` (device pushes unless told),
    /// created on first use. A channel-management or broadcast pool is another authority's and keeps
    /// one connection (HTTP/2 multiplexes its few requests).
    func pool(for credentials: APNsCredentials, environment: APNsEnvironment, service: APNsService = .push) -> APNsConnectionPool {
        let key = PoolKey(credentials: credentials.identity, environment: environment, service: service)
        return pools.withLock { pools in
            if let existing = pools[key] { return existing }
            var poolConfiguration = configuration
            if service != .push { poolConfiguration.connectionsPerPool = 1 }
            let created = APNsConnectionPool(
                environment: environment, endpoint: configuration.endpoint(for: environment, service: service), service: service,
                credentials: credentials, configuration: poolConfiguration, metrics: metrics, logger: logger)
            pools[key] = created
            return created
        }
    }

    /// The topic without the push type's suffix.
    static func bundleID(of request: APNsRequest) -> String {
        let suffix = request.pushType.topicSuffix
        if !suffix.isEmpty, request.topic.hasSuffix(suffix), request.topic.utf8.count > suffix.utf8.count {
            return String(request.topic.dropLast(suffix.count))
        }
        return request.topic
    }

    /// The HTTP/2 request: the headers of `APNsRequest.headers(providerToken:)` in the same order,
    /// built without intermediate arrays (this runs once per send).
    func makeRequest(_ request: APNsRequest, pool: APNsConnectionPool, authorization: String?) -> HTTP2Request {
        var headers: [HTTP2Header] = []
        headers.reserveCapacity(7)
        headers.append(HTTP2Header("apns-topic", request.topic))
        headers.append(HTTP2Header("apns-push-type", request.pushType.rawValue))
        headers.append(HTTP2Header("apns-priority", Self.priorityText(request.effectivePriority)))
        if let value = request.expiration.headerValue { headers.append(HTTP2Header("apns-expiration", value)) }
        if let collapseID = request.collapseID { headers.append(HTTP2Header("apns-collapse-id", collapseID)) }
        if let apnsID = request.apnsID { headers.append(HTTP2Header("apns-id", apnsID.uuidString)) }
        if let authorization { headers.append(HTTP2Header("authorization", authorization)) }
        return HTTP2Request(method: "POST", path: request.path, authority: pool.authority, headers: headers, body: request.payload)
    }

    private static func priorityText(_ priority: APNsPriority) -> String {
        switch priority.rawValue {
        case 10: "10"
        case 5: "5"
        case 1: "1"
        default: priority.description
        }
    }

    func record(_ response: APNsResponse) {
        metrics.increment("status_\(response.status)")
        guard let reason = response.reason else { return }
        metrics.increment("reason_\(reason.rawValue)")
        if reason.raisesAlert { metrics.increment("alerts") }
        switch reason {
        case .unknown(let text):
            metrics.increment("unknown_reasons")
            logger.warning("APNs answered with an unknown reason; treated as a rejection", ["status": "\(response.status)", "reason": text])
        case .tooManyProviderTokenUpdates:
            metrics.increment("provider_token_updates_refused")
            logger.error("APNs refused a provider token change (TooManyProviderTokenUpdates): JWT reuse is broken", [:])
        case .expiredProviderToken:
            metrics.increment("expired_provider_tokens")
            logger.debug("APNs answered ExpiredProviderToken", [:])
        default:
            if reason.raisesAlert { logger.error("APNs refused our credentials or configuration", ["reason": reason.rawValue]) }
        }
    }

    // MARK: Circuit breaker and device gate inputs

    /// Whether an answer is Apple-wide trouble for the circuit breaker: a 5xx, or a 429 that is not
    /// about one device (`TooManyRequests`) nor our provider token (`TooManyProviderTokenUpdates`).
    static func isAppleWideFailure(status: Int, reason: APNsReason?) -> Bool {
        if status >= 500 { return true }
        guard status == 429 else { return false }
        return reason != .tooManyRequests && reason != .tooManyProviderTokenUpdates
    }

    /// What an attempt's event means for its device token's gate.
    static func gateOutcome(of event: APNsRetryStateMachine.Event) -> APNsDeviceGates.Outcome {
        switch event {
        case .response(200, _): .delivered
        case .response(429, .tooManyRequests?): .tokenFailure
        case .streamTimeout: .streamTimeout
        default: .other
        }
    }
}
