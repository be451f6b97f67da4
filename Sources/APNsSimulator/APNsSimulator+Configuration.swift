import APNs
import Foundation
import HTTP2
import ProtobufCodec
import PushDomain
import ServiceCore

extension APNsSimulator {
    /// A provider-token key the simulator trusts: Apple's Key ID, the team that owns it, its public
    /// key and its scope: for keys restricted to one environment, that environment; for
    /// topic-specific keys, their bundle IDs (docs/apns-protocol.md §4 "Key scope").
    public struct TrustedKey: Sendable {
        /// The 10-character Key ID (`kid`).
        public var keyID: String
        /// The 10-character Team ID (`iss`).
        public var teamID: String
        /// The P-256 public key in PEM (`-----BEGIN PUBLIC KEY-----`).
        public var publicKeyPEM: String
        /// The only environment this key works in; nil = both. A token signed with it on the other
        /// environment's listener gets 403 `BadEnvironmentKeyIdInToken`.
        public var environment: APNsEnvironment?
        /// The bundle IDs a topic-specific key covers; nil = every topic of its team. A connection
        /// keeps the list it saw at its first push: a push on it to another bundle ID gets 400
        /// `TopicDisallowed`, even after the list grew (only new connections see a new bundle ID).
        public var topics: [String]?

        /// Creates a trusted key.
        public init(keyID: String, teamID: String, publicKeyPEM: String, environment: APNsEnvironment? = nil, topics: [String]? = nil) {
            self.keyID = keyID
            self.teamID = teamID
            self.publicKeyPEM = publicKeyPEM
            self.environment = environment
            self.topics = topics
        }
    }

    /// A device token the simulator knows: which environment it belongs to and, optionally, which
    /// app (bundle ID). Unknown tokens that are well formed are accepted for any topic, so a plain
    /// simulator behaves like APNs for valid tokens.
    public struct TokenRegistration: Sendable, Equatable {
        /// The token (any case; stored as lowercase hex).
        public var token: String
        /// Its environment: a push on the other environment's listener gets 400 `BadDeviceToken`
        /// (docs/apns-protocol.md §9). nil: a token neither environment issued (JSON `"none"`): both
        /// listeners answer `BadDeviceToken`.
        public var environment: APNsEnvironment?
        /// The app's bundle ID; a push whose topic (without its push-type suffix) differs gets 400
        /// `DeviceTokenNotForTopic`. nil = any topic.
        public var bundleID: String?

        /// Creates a registration.
        public init(token: String, environment: APNsEnvironment?, bundleID: String? = nil) {
            self.token = token
            self.environment = environment
            self.bundleID = bundleID
        }
    }

    /// A token APNs no longer delivers to: pushes get 410 with `{"reason":…,"timestamp":<ms>}`.
    public struct TokenInvalidation: Sendable, Equatable {
        /// The token (any case; stored as lowercase hex).
        public var token: String
        /// When APNs confirmed the token was no longer valid, ms since the epoch (the 410 `timestamp`).
        public var timestampMilliseconds: Int64
        /// `.unregistered` or `.expiredToken`.
        public var reason: APNsReason
        /// Only pushes to this bundle ID get the 410; nil = every topic.
        public var bundleID: String?

        /// Creates an invalidation.
        public init(token: String, timestampMilliseconds: Int64, reason: APNsReason = .unregistered, bundleID: String? = nil) {
            self.token = token
            self.timestampMilliseconds = timestampMilliseconds
            self.reason = reason
            self.bundleID = bundleID
        }
    }

    /// Where and how the simulator listens, and what it starts with.
    public struct Configuration: Sendable {
        /// Address to bind. Default `127.0.0.1`.
        public var host: String = "127.0.0.1"
        /// TLS port of the production listener; 0 picks one. Default 0.
        public var productionPort: Int = 0
        /// TLS port of the sandbox (development) listener; 0 picks one. Default 0.
        public var sandboxPort: Int = 0
        /// Cleartext HTTP/2 (h2c, prior knowledge) port of the admin API; 0 picks one, nil disables
        /// it. Default 0.
        public var adminPort: Int? = 0
        /// Address the admin API binds to. It is a development tool without authentication: keep it on
        /// loopback unless the network around it is private. Default `127.0.0.1`, whatever `host` is.
        public var adminHost: String = "127.0.0.1"
        /// SETTINGS of the push listeners before the simulator's own (SETTINGS_MAX_CONCURRENT_STREAMS
        /// from `initialMaxConcurrentStreams`, Apple's 65,535 stream window and 8,000 header list).
        /// Default `HTTP2Settings.server`.
        public var settings = HTTP2Settings.server
        /// Limits of every listener, push and admin (docs/http2-server-limits.md). Default: the
        /// `HTTP2ServerLimits` defaults, except the idle timeout: one hour, because Apple asks providers
        /// to keep their connections open and reuse them (docs/apns-protocol.md), so a stand-in for
        /// Apple must not close a provider's healthy idle connection after two minutes.
        public var limits: HTTP2ServerLimits = {
            var limits = HTTP2ServerLimits()
            limits.idleTimeout = .seconds(3600)
            return limits
        }()
        /// PEM certificate chain the push listeners present.
        public var certificateChainFile: String
        /// PEM private key of that certificate.
        public var privateKeyFile: String
        /// PEM file of the CA that issues provider (client) certificates. When set, the push listeners
        /// ask for a client certificate; a connection that presents one verified against this CA is a
        /// certificate-auth connection (docs/apns-protocol.md §5). nil = token auth only. Default nil.
        public var clientCAFile: String?
        /// Provider-token keys accepted.
        public var trustedKeys: [TrustedKey]
        /// Faults active from the start (and restored by `reset()`). Default: none.
        public var faults = APNsSimulatorFaults()
        /// Tokens registered from the start (and restored by `reset()`).
        public var registrations: [TokenRegistration] = []
        /// Tokens invalidated from the start (and restored by `reset()`).
        public var invalidations: [TokenInvalidation] = []
        /// How many received requests the admin API keeps, oldest dropped first. Default 10,000.
        public var recordLimit: Int = 10_000
        /// Broadcast channels one app may have per environment (Apple: 10,000; `PUSH_SIM_CHANNEL_LIMIT`).
        /// Past it, creating one gets 400 `CannotCreateChannelConfig`.
        public var channelLimit: Int = 10_000
        /// SETTINGS_MAX_CONCURRENT_STREAMS of a new connection, until it is trusted. Default 1, as
        /// APNs does with token auth (docs/apns-protocol.md §6).
        public var initialMaxConcurrentStreams: UInt32 = 1
        /// Event-loop threads per push listener. Default: the number of active processors.
        public var eventLoopCount: Int = ProcessInfo.processInfo.activeProcessorCount
        /// The clock for JWT age, the 20-minute token-update rule, rate windows, 410 defaults and
        /// record times. A `ManualWallClock` can also be moved through `POST /admin/clock`.
        public var clock: any WallClock = SystemWallClock()

        /// Creates a configuration with the defaults listed on each property.
        public init(certificateChainFile: String, privateKeyFile: String, trustedKeys: [TrustedKey]) {
            self.certificateChainFile = certificateChainFile
            self.privateKeyFile = privateKeyFile
            self.trustedKeys = trustedKeys
        }

        /// Applies a config file: a JSON object with optional keys `faults` (see
        /// ``APNsSimulatorFaults``), `tokens` (`[{"token","environment","bundle_id"?}]`) and
        /// `unregistered` (`[{"token","timestamp_ms"?,"reason"?,"bundle_id"?}]`, timestamp default:
        /// the clock's now, reason `Unregistered` or `ExpiredToken`).
        /// - Throws: `APNsSimulatorError` `.invalidConfiguration` when the file cannot be read or a
        ///   key is malformed.
        public mutating func apply(configFile path: String) throws(APNsSimulatorError) {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw APNsSimulatorError(.invalidConfiguration, "config file \(path) cannot be read")
            }
            var reader = JSONReader(try JSONReader.object(parsing: Array(data), "config file \(path)"), path: "config")
            if let faults = try reader.object("faults") { self.faults = try APNsSimulatorFaults(jsonObject: faults) }
            if let tokens = try reader.array("tokens") {
                registrations += try tokens.enumerated().map { (index, item) throws(APNsSimulatorError) in
                    try TokenRegistration(jsonObject: item, path: "config.tokens[\(index)]")
                }
            }
            if let tokens = try reader.array("unregistered") {
                let now = clock.nowMilliseconds()
                invalidations += try tokens.enumerated().map { (index, item) throws(APNsSimulatorError) in
                    try TokenInvalidation(jsonObject: item, path: "config.unregistered[\(index)]", now: now)
                }
            }
            try reader.finish()
        }
    }
}

extension APNsSimulator.TokenRegistration {
    init(jsonObject: JSONValue, path: String) throws(APNsSimulatorError) {
        guard case .object(let object) = jsonObject else {
            throw APNsSimulatorError(.invalidConfiguration, "\(path): expected an object")
        }
        var reader = JSONReader(object, path: path)
        guard let token = try reader.string("token") else {
            throw APNsSimulatorError(.invalidConfiguration, "\(path).token is required")
        }
        let text = try reader.string("environment")
        guard let text, text == "none" || APNsEnvironment(rawValue: text) != nil else {
            throw APNsSimulatorError(.invalidConfiguration, "\(path).environment: expected \"sandbox\", \"production\" or \"none\"")
        }
        let bundleID = try reader.string("bundle_id")
        try reader.finish()
        self.init(token: token, environment: APNsEnvironment(rawValue: text), bundleID: bundleID)
    }
}

extension APNsSimulator.TokenInvalidation {
    init(jsonObject: JSONValue, path: String, now: Int64) throws(APNsSimulatorError) {
        guard case .object(let object) = jsonObject else {
            throw APNsSimulatorError(.invalidConfiguration, "\(path): expected an object")
        }
        var reader = JSONReader(object, path: path)
        guard let token = try reader.string("token") else {
            throw APNsSimulatorError(.invalidConfiguration, "\(path).token is required")
        }
        let reason = APNsReason(rawValue: try reader.string("reason") ?? "Unregistered")
        guard reason == .unregistered || reason == .expiredToken else {
            throw APNsSimulatorError(.invalidConfiguration, "\(path).reason: expected \"Unregistered\" or \"ExpiredToken\"")
        }
        let timestamp = try reader.int64("timestamp_ms") ?? now
        let bundleID = try reader.string("bundle_id")
        try reader.finish()
        self.init(token: token, timestampMilliseconds: timestamp, reason: reason, bundleID: bundleID)
    }
}

extension APNsSimulator.TrustedKey {
    /// Parses `KEYID:TEAMID:/path/to/public-key.pem[:sandbox|:production][:topics=ID+ID…]` entries
    /// separated by commas (the `PUSH_SIM_KEYS` format), reading each file. The optional suffixes
    /// restrict the key to one environment and to the listed bundle IDs (joined by `+`).
    /// - Throws: `APNsSimulatorError` `.invalidKey` naming the entry that is malformed or whose file
    ///   cannot be read.
    public static func parseList(_ text: String) throws(APNsSimulatorError) -> [APNsSimulator.TrustedKey] {
        try text.split(separator: ",").map { entry throws(APNsSimulatorError) in
            let parts = entry.split(separator: ":", maxSplits: 2).map(String.init)
            guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw APNsSimulatorError(.invalidKey, "trusted key \"\(entry)\": expected KEYID:TEAMID:/path/to/public-key.pem")
            }
            var path = parts[2]
            var topics: [String]?
            if let marker = path.range(of: ":topics=", options: .backwards) {
                let list = path[marker.upperBound...].split(separator: "+").map(String.init)
                guard !list.isEmpty else {
                    throw APNsSimulatorError(.invalidKey, "trusted key \(parts[0]): \":topics=\" lists no bundle ID")
                }
                topics = list
                path = String(path[..<marker.lowerBound])
            }
            var environment: APNsEnvironment?
            for candidate in APNsEnvironment.allCases where path.hasSuffix(":" + candidate.rawValue) {
                environment = candidate
                path = String(path.dropLast(candidate.rawValue.count + 1))
            }
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw APNsSimulatorError(.invalidKey, "trusted key \(parts[0]): cannot read \(path)")
            }
            return APNsSimulator.TrustedKey(keyID: parts[0], teamID: parts[1], publicKeyPEM: pem, environment: environment, topics: topics)
        }
    }
}
