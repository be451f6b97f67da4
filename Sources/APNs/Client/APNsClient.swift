import Foundation
import HTTP2
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
/// - 429 `TooManyRequests` holds back every send to that device token only, growing per strike;
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
            /// Most attempts (sends APNs may have processed) per notification. Default 5.
            public var maxAttempts: Int = 5
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
        /// How long transient failures are retried (`PUSH_APNS_RETRY_HORIZON_IMMEDIATE_MS`,
        /// `PUSH_APNS_RETRY_HORIZON_MS`).
        public var retryHorizon = APNsRetryHorizon()
        /// Warn (log and metric `certificates_expiring`) when a provider certificate expires within
        /// this. Default 30 days.
        public var certificateExpiryWarning: Duration = .seconds(30 * 86_400)
        /// Wall clock for expirations and certificate checks.
        public var clock: any WallClock = SystemWallClock()

        public init() {}

        func endpoint(for environment: APNsEnvironment) -> Endpoint {
            environment == .production ? production : sandbox
        }
    }

    private struct PoolKey: Hashable {
        let credentials: ObjectIdentifier
        let environment: APNsEnvironment
    }

    private let configuration: Configuration
    private let credentialsByBundleID: [String: APNsCredentials]
    private let defaultCredentials: APNsCredentials?
    private let pools = Mutex<[PoolKey: APNsConnectionPool]>([:])
    private let tokenHolds = Mutex<[String: TokenHold]>([:])
    /// Entries in `tokenHolds` (read without the lock on every send).
    private let tokenHoldCount = Atomic<Int>(0)
    private let logger: Logger
    /// Counters for dashboards and alerts.
    public let metrics = APNsClientMetrics()

    private struct TokenHold {
        var until: ContinuousClock.Instant
        var strikes: Int
    }

    /// Creates a client that signs every request with `tokens`' key (one team for every bundle ID).
    public convenience init(configuration: Configuration, tokens: APNsProviderTokenCache, logger: Logger = Logger(label: "apns.client")) {
        self.init(configuration: configuration, credentials: [:], defaultCredentials: .token(tokens), logger: logger)
    }

    /// Creates a client for several apps and teams.
    /// - Parameters:
    ///   - credentials: credentials per bundle ID (the topic without its push-type suffix; for
    ///     `mdm`, the certificate's topic).
    ///   - defaultCredentials: for bundle IDs not in `credentials`; nil refuses them.
    public init(
        configuration: Configuration, credentials: [String: APNsCredentials], defaultCredentials: APNsCredentials? = nil,
        logger: Logger = Logger(label: "apns.client")
    ) {
        self.configuration = configuration
        self.credentialsByBundleID = credentials
        self.defaultCredentials = defaultCredentials
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

    /// Sends one notification like ``send(_:environment:)``, with per-call options: who waits between
    /// attempts (``APNsSendOptions/waiter``) and until when retrying may go on
    /// (``APNsSendOptions/retryDeadline``).
    /// - Throws: as ``send(_:environment:)``, and whatever the waiter throws, unchanged.
    public func send(_ request: APNsRequest, environment: APNsEnvironment, options: APNsSendOptions = .init()) async throws -> APNsResponse {
        metrics.countRequest()
        let deadline = options.retryDeadline ?? retryDeadline(for: request)
        func pause(_ delay: Duration, _ attempts: Int, _ reason: APNsRetryReason) async throws {
            if let waiter = options.waiter {
                try await waiter.wait(delay, attemptsSoFar: attempts, reason: reason)
            } else {
                try await Task.sleep(for: delay)
            }
        }
        func fits(after delay: Duration) -> Bool {
            configuration.clock.nowMilliseconds() + delay.wholeMilliseconds <= Int64(deadline.timeIntervalSince1970 * 1000)
        }
        let pool = try pool(for: request, environment: environment)
        var attempts = 0
        var resends = 0
        var failures = 0
        var refreshedProviderToken = false
        var holdTokenAfterStrike = false
        while true {
            try await waitForTokenHold(request.deviceToken.hex)
            let connection: PooledConnection
            do {
                connection = try await pool.acquire()
            } catch let error as HTTP2Error {
                // No connection could be opened: nothing was sent; back off like a dropped connection.
                failures += 1
                let delay = configuration.retry.backoff.delay(afterFailures: failures)
                guard fits(after: delay) else {
                    throw APNsError(code: .deliveryFailed, message: "no connection to APNs: \(error.message)", cause: error, attempts: attempts)
                }
                try await pause(delay, attempts, .connectionFailure)
                continue
            }
            let authorization: APNsJWT?
            let authorizationValue: String?
            let choice: APNsConnectionPool.ProviderTokenChoice
            do {
                choice = try pool.providerToken(for: connection)
            } catch {
                pool.release(connection, status: nil)
                throw error
            }
            switch choice {
            case .certificate:
                authorization = nil
                authorizationValue = nil
            case .send(let jwt, let value):
                authorization = jwt
                authorizationValue = value
            case .retireConnection:
                pool.release(connection, status: nil)
                pool.retire(connection, because: "its JWT can neither be kept nor changed yet")
                continue
            }
            let http2Request = makeRequest(request, pool: pool, authorization: authorizationValue)
            let raw: HTTP2Response
            do {
                raw = try await connection.connection.send(http2Request, timeout: configuration.requestTimeout)
            } catch let error as HTTP2Error {
                pool.release(connection, status: nil)
                if error.code == .cancelled || Task.isCancelled { throw CancellationError() }
                if error.wasNotProcessed {
                    // Not processed by APNs: resend elsewhere, not a failure (RFC 9113 §8.7).
                    resends += 1
                    metrics.increment("unprocessed_resends")
                    if resends > configuration.retry.maxUnprocessedResends {
                        throw APNsError(code: .deliveryFailed, message: "sent \(resends) times without APNs processing it", cause: error, attempts: attempts)
                    }
                    if error.code == .goingAway, connection.connection.isUsable == false { pool.retire(connection, because: "going away") }
                    continue
                }
                attempts += 1
                failures += 1
                metrics.countAttempt(status: nil)
                metrics.increment(error.code == .timeout ? "timeouts" : "connection_errors")
                if error.code == .connectionClosed || error.code == .protocolError {
                    pool.retire(connection, because: "request failed: \(error.code)")
                }
                guard error.isRetryable || error.code == .streamReset || error.code == .protocolError else {
                    throw APNsError(code: .deliveryFailed, message: "APNs request failed: \(error.message)", cause: error, attempts: attempts)
                }
                let delay = configuration.retry.backoff.delay(afterFailures: failures)
                guard fits(after: delay) else {
                    throw APNsError(code: .deliveryFailed, message: "no answer from APNs after \(attempts) attempts: \(error.message)", cause: error, attempts: attempts)
                }
                metrics.increment("retries")
                try await pause(delay, attempts, error.code == .timeout ? .streamTimeout : .connectionFailure)
                continue
            } catch {
                pool.release(connection, status: nil)
                throw error
            }

            attempts += 1
            pool.release(connection, status: raw.status)
            metrics.countAttempt(status: raw.status)
            var response = APNsResponse(status: raw.status, headers: raw.headers, body: raw.body)
            response.attempts = attempts
            response.unprocessedResends = resends
            if response.isSuccess {
                if holdTokenAfterStrike { clearTokenHold(request.deviceToken.hex) }
                return response
            }
            record(response)
            if response.hasUnknownReason { return response }
            let delay: Duration
            switch response.action {
            case .deactivateToken, .reject:
                return response
            case .retryWithBackoff:
                failures += 1
                delay = configuration.retry.backoff.delay(afterFailures: failures)
            case .retryOnNewConnection:
                pool.retire(connection, because: "APNs answered \(response.status) \(response.reason?.rawValue ?? "")")
                delay = .zero
            case .refreshProviderTokenAndRetryOnce:
                guard !refreshedProviderToken, let cache = pool.credentials.providerTokens else { return response }
                refreshedProviderToken = true
                if let authorization { cache.invalidate(authorization) }
                pool.retire(connection, because: "ExpiredProviderToken")
                delay = .zero
            case .retryAfterDelayKeepingJWT:
                delay = configuration.retry.providerTokenUpdateDelay
            case .backOffDeviceToken:
                holdTokenAfterStrike = true
                delay = holdToken(request.deviceToken.hex)
            }
            guard fits(after: delay) else { return response }
            metrics.increment("retries")
            if delay > .zero, response.action != .backOffDeviceToken {
                try await pause(delay, attempts, response.action == .retryAfterDelayKeepingJWT ? .providerToken : .serverError(status: response.status))
            }
        }
    }

    /// Closes every pool: waiting callers fail with `.shutDown`, open streams finish.
    public func shutdown() async {
        let all = pools.withLock { pools in
            defer { pools.removeAll() }
            return Array(pools.values)
        }
        for pool in all { await pool.shutdown() }
    }

    // MARK: Helpers

    private func pool(for request: APNsRequest, environment: APNsEnvironment) throws(APNsError) -> APNsConnectionPool {
        let bundleID = Self.bundleID(of: request)
        guard let credentials = credentialsByBundleID[bundleID] ?? credentialsByBundleID[request.topic] ?? defaultCredentials else {
            throw APNsError(code: .missingCredentials, message: "no APNs credentials for bundle ID \(bundleID)")
        }
        let key = PoolKey(credentials: credentials.identity, environment: environment)
        return pools.withLock { pools in
            if let existing = pools[key] { return existing }
            let created = APNsConnectionPool(
                environment: environment, credentials: credentials, configuration: configuration, metrics: metrics, logger: logger)
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
    private func makeRequest(_ request: APNsRequest, pool: APNsConnectionPool, authorization: String?) -> HTTP2Request {
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

    private func record(_ response: APNsResponse) {
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
            logger.warning("APNs answered ExpiredProviderToken: minting a new JWT on a new connection", [:])
        default:
            if reason.raisesAlert { logger.error("APNs refused our credentials or configuration", ["reason": reason.rawValue]) }
        }
    }

    // MARK: Per-device-token hold (429 TooManyRequests)

    /// Records a strike against `token` and returns how long its sends are held back.
    private func holdToken(_ token: String) -> Duration {
        tokenHolds.withLock { holds in
            let now = ContinuousClock.now
            if holds.count > 10_000 { holds = holds.filter { $0.value.until > now } }
            defer { tokenHoldCount.store(holds.count, ordering: .relaxed) }
            var hold = holds[token] ?? TokenHold(until: now, strikes: 0)
            hold.strikes += 1
            let base = configuration.retry.tooManyRequestsDelay * (1 << min(hold.strikes - 1, 20))
            let delay = min(base, max(configuration.retry.backoff.maximum, configuration.retry.tooManyRequestsDelay)) * Double.random(in: 0.75...1.0)
            hold.until = max(hold.until, now + delay)
            holds[token] = hold
            return now.duration(to: hold.until)
        }
    }

    private func clearTokenHold(_ token: String) {
        tokenHolds.withLock { holds in
            holds.removeValue(forKey: token)
            tokenHoldCount.store(holds.count, ordering: .relaxed)
        }
    }

    /// Waits while `token` is held back after 429 `TooManyRequests`; other tokens never wait here.
    private func waitForTokenHold(_ token: String) async throws {
        while tokenHoldCount.load(ordering: .relaxed) > 0 {
            let until: ContinuousClock.Instant? = tokenHolds.withLock { holds in
                guard let hold = holds[token] else { return nil }
                return hold.until > .now ? hold.until : nil
            }
            guard let until else { return }
            try await Task.sleep(until: until, clock: .continuous)
        }
    }
}
