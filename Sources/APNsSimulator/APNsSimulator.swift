import APNs
import Foundation
import HTTP2
import PushDomain
import ServiceCore

/// A stand-in for Apple's APNs servers, for tests, benchmarks and staging systems.
///
/// One TLS listener per environment (ALPN `h2`) answers `POST /3/device/<token>` with every check of
/// docs/apns-protocol.md §2 and Apple's status and JSON body from §3; `apns-unique-id` is sent by the
/// sandbox listener only. Authentication follows §4–§6: provider tokens (known `kid`, `iss` = the
/// key's team, ES256 signature as R‖S or DER, `iat` at most one hour old, one JWT change per 20
/// minutes per connection, one Key ID per connection) or, with `clientCAFile`, client certificates
/// whose topics come from Apple's extension or the subject UID. A new connection announces
/// SETTINGS_MAX_CONCURRENT_STREAMS = 1 and raises it once a request succeeded (token auth) or at its
/// first request (certificate auth). Faults (``APNsSimulatorFaults``) are injected on demand. Time
/// comes from the configured `WallClock`.
///
/// The same listeners also serve Apple's broadcast-channel APIs (§8): channel management
/// (`/1/apps/<bundle id>/channels`, `/all-channels`) and broadcast sends
/// (`/4/broadcasts/apps/<bundle id>`), with the per-app quota (`Configuration.channelLimit`) and a
/// subscriber count per channel (``SimulatorChannels``); Apple serves them on other hosts and ports,
/// which clients take as settings.
///
/// Start it in-process (ports 0 pick free ports) or run the `apns-simulator` executable.
///
/// ## Admin API
///
/// Development only, unauthenticated: anyone who reaches it can read what was received and change
/// faults, so it binds to `Configuration.adminHost` (loopback by default), never to the push listeners'
/// host (docs/http2-server-limits.md). Cleartext HTTP/2 with prior knowledge (h2c) on `adminPort`: `curl --http2-prior-knowledge`,
/// Python `httpx.Client(http1=False, http2=True)`. Bodies are JSON; errors are
/// `{"error":"<message>"}` with 400 (bad body), 404 (no route) or 409.
///
/// - `GET /admin/requests` → `{"requests":[{"environment":"sandbox"|"production","connection":<id>,
///   "stream":<id>,"received_at_ms":<ms>,"method","path","headers":[[name,value],…],"body":<text>,
///   "body_bytes":<n>,"status":<int>|null,"reason"?,"timestamp"?,"apns_id"?,"fault"?:"unanswered"|
///   "hung"|"held"|"dropped"|"injected","delay_ms":<ms>,"certificate_subject"?,"jwt"?:{"header":{…},"claims":{…}}}]}`,
///   oldest first, at most `recordLimit`. `jwt` is decoded from `authorization`, not verified.
///   Query parameters narrow it (``RecordQuery``): `?device_token=<hex>`, `since_ms=<ms>` (simulator
///   clock), `limit=<n>` (the newest n); an unknown parameter or a bad value is a 400 naming it.
/// - `GET /admin/counters` → `{"counters":{"200":n,"400 BadDeviceToken":n,"unanswered":n,"dropped":n,
///   "hung":n,"held":n,"goaway":n,…},"total":<requests>}`. `unanswered`, `hung` and `dropped` count requests left without an
///   answer (and admin drops); `held` counts answers the `hold` fault kept back (also counted by
///   their status); `goaway` counts GOAWAYs sent by faults or the admin API.
/// - `POST /admin/reset` → `{"reset":true}`: forgets requests and counters, restores the start faults
///   and token lists, sends every held answer.
/// - `GET /admin/faults` → the faults in force (JSON form of ``APNsSimulatorFaults``, every key).
/// - `PUT /admin/faults` with that JSON (missing keys = off) → the new faults. Replaces all faults.
/// - `GET /admin/held` → `{"held":[{"token","environment","connection","stream","status"}]}`: answers
///   the `hold` fault keeps back, oldest first.
/// - `POST /admin/held/release` with optional `{"token":"<hex>"}` → `{"released":n}`: sends the
///   answers held for that token, or every held answer.
/// - `POST /admin/tokens` with `{"token","environment":"sandbox"|"production"|"none","bundle_id"?}`
///   registers a token: other environment → `BadDeviceToken`, other bundle ID →
///   `DeviceTokenNotForTopic`; `"none"`: issued by neither environment, `BadDeviceToken` on both.
/// - `POST /admin/tokens/unregistered` with `{"token","timestamp_ms"?,"reason"?:"Unregistered"|
///   "ExpiredToken","bundle_id"?}` → 410 for that token with `timestamp` (default: now).
/// - `GET /admin/connections` → `{"connections":[{"environment","connection","remote","auth":"token"|
///   "certificate","streams","trusted","max_concurrent_streams","key_id"?,"team_id"?,"key_topics"?,
///   "certificate_subject"?,"certificate_topics"?}]}` (connections that sent a request; the key and
///   team bound by the first push, and the bundle IDs of a topic-specific key as bound then).
/// - `GET /admin/channels` → `{"channels":[{"channel_id","bundle_id","environment",
///   "message_storage_policy","subscribers","broadcasts","created_at_ms"}]}`, oldest first.
/// - `PUT /admin/channels/subscribers` with `{"channel_id","subscribers":n}`: the devices one broadcast
///   to that channel reaches (counted in the counter `broadcast_reached`).
/// - `PUT /admin/broadcast` with `{"bundle_id","enabled":false|true}`: broadcast off for an app
///   (its channel and broadcast requests get `FeatureNotEnabled`).
/// - `PUT /admin/keys/topics` with `{"key_id","topics":["<bundle id>",…]|null}` → the key's new
///   topic scope (null: every topic of its team). Connections that already pushed keep the scope
///   they bound; new connections bind the new one.
/// - `POST /admin/connections/goaway` with optional `{"environment","connection","reason","error_code"}`
///   → GOAWAY with `{"reason":…}` debug data (default `Shutdown`, NO_ERROR); returns the ids.
/// - `POST /admin/connections/drop` with optional `{"environment","connection"}` → TCP close without
///   GOAWAY; returns the ids.
/// - `GET /admin/clock` → `{"now_ms","manual","offset_ms"?}`; `POST /admin/clock` with `{"advance_ms"}` or
///   `{"set_ms"}` moves a `ManualWallClock`, with `{"offset_ms"}` or `{"advance_ms"}` an
///   `OffsetWallClock` (409 with the plain system clock).
///
/// Every answer carries a `date` header (IMF-fixdate) from the simulator's clock, as HTTP servers do
/// (RFC 9110 §6.6.1); a provider can read the clock skew from it.
public final class APNsSimulator: Sendable {
    /// The bound production port.
    public let productionPort: Int
    /// The bound sandbox port.
    public let sandboxPort: Int
    /// The bound admin port, if enabled.
    public let adminPort: Int?

    private let servers: [HTTP2Server]
    private let state: SimulatorState

    private init(productionPort: Int, sandboxPort: Int, adminPort: Int?, servers: [HTTP2Server], state: SimulatorState) {
        self.productionPort = productionPort
        self.sandboxPort = sandboxPort
        self.adminPort = adminPort
        self.servers = servers
        self.state = state
    }

    /// Starts the listeners.
    /// - Throws: `APNsSimulatorError` `.invalidKey` when a trusted key is not a P-256 public key,
    ///   `.invalidConfiguration` when a configured token is malformed, `.startFailed` when a port
    ///   cannot be bound or the TLS files cannot be loaded.
    public static func start(configuration: Configuration) throws(APNsSimulatorError) -> APNsSimulator {
        let state = try SimulatorState(configuration: configuration)
        let tls = HTTP2ServerTLS(
            certificateChainFile: configuration.certificateChainFile, privateKeyFile: configuration.privateKeyFile,
            clientCAFile: configuration.clientCAFile, requireClientCertificate: false)
        var settings = configuration.settings
        settings.maxConcurrentStreams = configuration.initialMaxConcurrentStreams
        settings.initialWindowSize = 65_535
        settings.maxHeaderListSize = 8_000
        var servers: [HTTP2Server] = []
        func listen(_ environment: APNsEnvironment, port: Int) throws(APNsSimulatorError) -> HTTP2Server {
            var server = HTTP2Server.Configuration(host: configuration.host, port: port, tls: tls, settings: settings)
            server.eventLoopCount = configuration.eventLoopCount
            server.limits = configuration.limits
            do {
                let started = try HTTP2Server.start(configuration: server) { request, responder in
                    state.handlePush(request, responder, environment: environment)
                }
                servers.append(started)
                return started
            } catch {
                for server in servers { server.close() }
                throw APNsSimulatorError(.startFailed, "\(environment) listener on \(configuration.host):\(port)", cause: error)
            }
        }
        let production = try listen(.production, port: configuration.productionPort)
        let sandbox = try listen(.sandbox, port: configuration.sandboxPort)
        var adminPort: Int?
        if let port = configuration.adminPort {
            var adminConfiguration = HTTP2Server.Configuration(host: configuration.adminHost, port: port)
            adminConfiguration.eventLoopCount = 1
            adminConfiguration.limits = configuration.limits
            let api = AdminAPI(state: state)
            do {
                let admin = try HTTP2Server.start(configuration: adminConfiguration) { request, responder in
                    responder.respond(api.handle(request))
                }
                servers.append(admin)
                adminPort = admin.port
            } catch {
                for server in servers { server.close() }
                throw APNsSimulatorError(.startFailed, "admin listener on \(configuration.adminHost):\(port)", cause: error)
            }
        }
        state.liveConnectionKeys.withLock {
            // Weak: the servers' handlers hold the state, so strong captures would make a cycle.
            $0 = { @Sendable [weak production, weak sandbox] in
                var keys = Set<UInt64>()
                for connection in production?.connections() ?? [] {
                    keys.insert(ConnectionState.key(environment: .production, connectionID: connection.id))
                }
                for connection in sandbox?.connections() ?? [] {
                    keys.insert(ConnectionState.key(environment: .sandbox, connectionID: connection.id))
                }
                return keys
            }
        }
        return APNsSimulator(
            productionPort: production.port, sandboxPort: sandbox.port, adminPort: adminPort, servers: servers, state: state)
    }

    /// The TLS port of `environment`'s listener.
    public func port(for environment: APNsEnvironment) -> Int {
        environment == .production ? productionPort : sandboxPort
    }

    /// What the push listeners received, oldest first (at most `Configuration.recordLimit`).
    public func receivedRequests() -> [APNsSimulatorRecord] { state.recorder.records() }

    /// Counters by outcome (`"200"`, `"400 BadDeviceToken"`, `"unanswered"`, `"dropped"`, `"goaway"`).
    public func counters() -> [String: Int] { state.recorder.counters().counters }

    /// The faults in force.
    public var faults: APNsSimulatorFaults { state.faults }

    /// Replaces the faults in force (per-token rate windows restart).
    public func setFaults(_ faults: APNsSimulatorFaults) { state.setFaults(faults) }

    /// Registers a device token to an environment and optionally an app.
    /// - Throws: `APNsSimulatorError` `.invalidConfiguration` when the token is malformed.
    public func register(_ registration: TokenRegistration) throws(APNsSimulatorError) { try state.register(registration) }

    /// Marks a device token as no longer valid: pushes get 410 with the timestamp.
    /// - Throws: `APNsSimulatorError` `.invalidConfiguration` when the token is malformed.
    public func invalidate(_ invalidation: TokenInvalidation) throws(APNsSimulatorError) { try state.invalidate(invalidation) }

    /// Forgets requests and counters; restores the configured faults and token lists; sends every
    /// held answer.
    public func reset() { state.reset() }

    /// The device tokens (lowercase hex) of the answers the `hold` fault keeps back, one entry per
    /// answer, oldest first.
    public func heldTokens() -> [String] { state.held.withLock { $0.map(\.token) } }

    /// Sends the answers held for `token` (any case; every held answer when nil), oldest first.
    /// - Returns: how many answers were released.
    @discardableResult
    public func releaseHeld(token: String? = nil) -> Int { state.releaseHeld(token: token?.lowercased()) }

    /// Sets how many devices one broadcast to `channelID` reaches (the admin API's
    /// `PUT /admin/channels/subscribers`, for tests in-process).
    /// - Throws: `APNsSimulatorError` `.invalidConfiguration` when no channel has the id or `count` < 0.
    public func setChannelSubscribers(_ count: Int, channelID: String) throws(APNsSimulatorError) {
        try state.setSubscribers(count, channelID: channelID)
    }

    /// Turns broadcast off (channel and broadcast requests get `FeatureNotEnabled`) or on for an app
    /// (the admin API's `PUT /admin/broadcast`).
    public func setBroadcastEnabled(_ enabled: Bool, bundleID: String) { state.setBroadcastEnabled(enabled, bundleID: bundleID) }

    /// Stops listening, sends GOAWAY and closes every connection after at most `gracePeriod`.
    public func shutdown(gracePeriod: Duration = .seconds(1)) async {
        for server in servers { await server.shutdown(gracePeriod: gracePeriod) }
    }

    /// Stops listening and drops every connection at once.
    public func close() {
        for server in servers { server.close() }
    }
}
