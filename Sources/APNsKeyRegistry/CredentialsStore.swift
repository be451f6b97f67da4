import APNs
import Foundation
import PushDomain
import ServiceCore
import Synchronization

/// The dispatcher's APNs credentials (README "APNs credentials"): a `CredentialsRegistry` with one
/// loaded key and one `APNsProviderTokenCache` per key entry, chosen per notification
/// (``choose(bundleID:environment:)``).
///
/// From `PUSH_APNS_CREDENTIALS_FILE` the registry is re-read by ``reload()`` (SIGHUP or a changed
/// file, `CredentialsReloadService`): a file that does not load leaves the current registry in use;
/// a key that stays in the file (same team, key id, `.p8` path and contents) keeps its cache, hence
/// its connection pools. Key material is never logged; only `TEAMID/KEYID` is.
public final class CredentialsStore: Sendable {
    /// What a send uses (``choose(bundleID:environment:)``).
    public enum Choice: Sendable {
        /// Send with `credentials`; on a provider-token refusal the client re-sends on `fallback`.
        case send(credentials: APNsCredentials, fallback: APNsCredentials?)
        /// No key may send it: refused before sending (`OUTCOME_REASON_NO_CREDENTIAL`), the reason names
        /// the entry.
        case refused(String)
    }

    /// A credentials file, or one of its keys, that cannot be used; names the file and the entry.
    public struct LoadError: Error, Sendable, CustomStringConvertible {
        /// One line per problem, each naming the file and the entry; never key material.
        public let description: String
    }

    private struct Loaded: Sendable {
        var registry: CredentialsRegistry
        /// By key identity: the `.p8` contents' SHA-256 (to see a replaced file) and the cache.
        var caches: [CredentialsRegistry.KeyIdentity: (digest: [UInt8], credentials: APNsCredentials)]
    }

    /// The credentials file, or nil for the single-key shorthand (nothing to reload).
    public let file: String?
    private let clock: any WallClock
    private let metrics: MetricsRegistry
    private let logger: Logger
    private let state: Mutex<Loaded>

    /// Loads `file` and every key it names (each `.p8` parsed as an EC P-256 key).
    /// - Parameters:
    ///   - clock: the provider-token caches' clock and the time keys are routed at.
    ///   - metrics: where the caches count `push_apns_jwt_mints_total`.
    /// - Throws: `LoadError` listing every problem, each naming the file and the entry.
    public init(file: String, clock: any WallClock = SystemWallClock(), metrics: MetricsRegistry = .shared,
                logger: Logger = Logger(label: "apns.credentials")) throws(LoadError) {
        self.file = file
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        let loaded = try Self.load(file: file, previous: nil, clock: clock, metrics: metrics)
        self.state = Mutex(loaded)
        logger.info("APNs credentials loaded", Self.summary(loaded.registry))
    }

    /// The single-key shorthand (`PUSH_APNS_TEAM_ID`, `PUSH_APNS_KEY_ID`, the `.p8`): one entry `*`
    /// with `tokens`' key for every app and environment.
    public init(single tokens: APNsProviderTokenCache, clock: any WallClock = SystemWallClock(),
                logger: Logger = Logger(label: "apns.credentials")) {
        self.file = nil
        self.clock = clock
        self.metrics = .shared
        self.logger = logger
        let identity = CredentialsRegistry.KeyIdentity(teamID: tokens.teamID, keyID: tokens.keyID, p8Path: "")
        let key = CredentialsRegistry.Key(
            identity: identity, environment: nil, topics: nil, activatesAt: .distantPast, activationIsExplicit: true,
            entry: "PUSH_APNS_KEY_ID (\(identity))")
        let registry = CredentialsRegistry(
            apps: [CredentialsRegistry.App(pattern: "*", keys: [key], entry: "PUSH_APNS_KEY_ID")], source: "PUSH_APNS_KEY_ID")
        self.state = Mutex(Loaded(registry: registry, caches: [identity: ([], .token(tokens))]))
    }

    /// The registry in use.
    public var registry: CredentialsRegistry { state.withLock { $0.registry } }

    /// The credentials for a notification to `bundleID` in `environment` now (the registry's route).
    public func choose(bundleID: String, environment: APNsEnvironment) -> Choice {
        let now = Date(timeIntervalSince1970: TimeInterval(clock.nowMilliseconds()) / 1000)
        return state.withLock { loaded in
            switch loaded.registry.route(bundleID: bundleID, environment: environment, now: now) {
            case .refused(let reason):
                return .refused(reason)
            case .key(let key, let fallback):
                guard let credentials = loaded.caches[key.identity]?.credentials else { return .refused("\(key.entry) is not loaded") }
                return .send(credentials: credentials, fallback: fallback.flatMap { loaded.caches[$0.identity]?.credentials })
            }
        }
    }

    /// What this dispatcher knows about each key now (`GET /v1/credentials` on its admin port): the
    /// registry's keys with their state and each key's last mint and last refusal (never key material).
    /// - Parameter fallbacks: the APNs client's keys in fallback now (`APNsClient.keysInFallback()`).
    public func report(fallbacks: [APNsKeyFallbacks.Refusal]) -> CredentialsReport {
        let now = Date(timeIntervalSince1970: TimeInterval(clock.nowMilliseconds()) / 1000)
        let (registry, caches) = state.withLock { ($0.registry, $0.caches) }
        var facts: [CredentialsRegistry.KeyIdentity: CredentialsReport.Facts] = [:]
        for (identity, cached) in caches {
            guard case .token(let cache) = cached.credentials else { continue }
            let refusal = cache.lastRefusal
            facts[identity] = CredentialsReport.Facts(
                lastMintSeconds: cache.currentIssuedAt, lastRefusalSeconds: refusal?.atSeconds, lastRefusalReason: refusal?.reason)
        }
        return CredentialsReport(registry: registry, facts: facts, fallbacks: fallbacks, now: now)
    }

    /// Re-reads the credentials file; on failure keeps the registry in use and logs why.
    /// - Parameter removed: called, once the new registry is in use, with the credentials of every key
    ///   the file no longer holds (or whose `.p8` changed): no send chooses them any more, so the caller
    ///   drains their connection pools (`APNsClient.drain(_:)`). Not called when nothing was removed.
    /// - Returns: whether the new registry is in use (false for the single-key shorthand).
    @discardableResult
    public func reload(removed: ([APNsCredentials]) -> Void = { _ in }) -> Bool {
        guard let file else { return false }
        let previous = state.withLock { $0 }
        do {
            let loaded = try Self.load(file: file, previous: previous, clock: clock, metrics: metrics)
            state.withLock { $0 = loaded }
            logger.notice("APNs credentials reloaded", Self.summary(loaded.registry))
            let gone = Self.removedCredentials(from: previous, in: loaded)
            if !gone.isEmpty {
                logger.notice("APNs keys removed: their connections drain", ["keys": gone.map(Self.label).joined(separator: " ")])
                removed(gone)
            }
            return true
        } catch {
            logger.error("APNs credentials NOT reloaded; the previous ones stay in use", ["error": "\(error)"])
            return false
        }
    }

    /// Parses `file` and loads every key, reusing `previous`'s cache of a key whose `.p8` is unchanged.
    private static func load(file: String, previous: Loaded?, clock: any WallClock, metrics: MetricsRegistry) throws(LoadError) -> Loaded {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw LoadError(description: "\(file): cannot read the credentials file (PUSH_APNS_CREDENTIALS_FILE)")
        }
        let now = Date(timeIntervalSince1970: TimeInterval(clock.nowMilliseconds()) / 1000)
        var registry: CredentialsRegistry
        do {
            registry = try CredentialsRegistry(json: Array(data), file: file, loadedAt: now)
        } catch {
            throw LoadError(description: error.description)
        }
        if let previous { registry = registry.keepingActivation(from: previous.registry) }
        var caches: [CredentialsRegistry.KeyIdentity: (digest: [UInt8], credentials: APNsCredentials)] = [:]
        var problems: [String] = []
        for key in registry.keys where caches[key.identity] == nil {
            guard let p8 = FileManager.default.contents(atPath: key.identity.p8Path) else {
                problems.append("\(file): \(key.entry): cannot read the .p8 file \(key.identity.p8Path)")
                continue
            }
            let digest = Digest.sha256(Array(p8))
            if let kept = previous?.caches[key.identity], kept.digest == digest {
                caches[key.identity] = kept
                continue
            }
            do {
                let signingKey = try APNsSigningKey(p8: String(decoding: p8, as: UTF8.self))
                let cache = APNsProviderTokenCache(
                    signingKey: signingKey, keyID: key.identity.keyID, teamID: key.identity.teamID, clock: clock, metrics: metrics)
                caches[key.identity] = (digest, .token(cache))
            } catch {
                // The APNs message quotes the PEM header it expected; without its dashes, so that the
                // log's last-defence scrubbing (a PEM block → `[redacted]`) keeps the reason readable.
                let message = error.message.replacingOccurrences(of: "-----BEGIN ", with: "BEGIN ").replacingOccurrences(of: "-----", with: "")
                problems.append("\(file): \(key.entry): \(key.identity.p8Path): \(message)")
            }
        }
        guard problems.isEmpty else { throw LoadError(description: problems.joined(separator: "\n")) }
        return Loaded(registry: registry, caches: caches)
    }

    /// The credentials `previous` held that `loaded` does not (the same cache object is the same key).
    private static func removedCredentials(from previous: Loaded, in loaded: Loaded) -> [APNsCredentials] {
        let kept = Set(loaded.caches.values.map { identity(of: $0.credentials) })
        var seen = Set<ObjectIdentifier>()
        return previous.caches.values.map(\.credentials).filter { credentials in
            let id = identity(of: credentials)
            return !kept.contains(id) && seen.insert(id).inserted
        }
    }

    private static func identity(of credentials: APNsCredentials) -> ObjectIdentifier {
        switch credentials {
        case .token(let cache): ObjectIdentifier(cache)
        case .certificate(let certificate): ObjectIdentifier(certificate)
        }
    }

    private static func label(_ credentials: APNsCredentials) -> String {
        switch credentials {
        case .token(let cache): "\(cache.teamID)/\(cache.keyID)"
        case .certificate: "certificate"
        }
    }

    /// Which key serves which app, for the log: `com.example.* → TEAM/KEY (+1 more)`; no key material.
    static func summary(_ registry: CredentialsRegistry) -> [String: String] {
        let apps = registry.apps.map { app in
            "\(app.pattern)=" + app.keys.map { "\($0.identity)" }.joined(separator: "+")
        }
        return ["file": registry.source, "apps": apps.joined(separator: " "), "keys": "\(Set(registry.keys.map(\.identity)).count)"]
    }
}
