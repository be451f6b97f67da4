import APNs
import Foundation
import ProtobufCodec

/// What a running dispatcher knows about each key of its credentials registry, for its admin port's
/// `GET /v1/credentials` and `pushctl credentials list --admin URL` (README "APNs credentials"): per app
/// entry and key, the scopes and `activate_at` the file gives, the key's state now, and the runtime facts
/// the file cannot tell: when its last provider token was minted, and APNs's last refusal of one. Never
/// key material. A value, built without I/O.
public struct CredentialsReport: Sendable, Equatable {
    /// One key of one app entry.
    public struct Key: Sendable, Equatable {
        /// The app entry's `bundle_id` (a bundle id or a prefix ending in `*`).
        public var bundleID: String
        /// The key's team and key id.
        public var teamID: String
        public var keyID: String
        /// `production`, `sandbox`, or `any`.
        public var environment: String
        /// The key's topic scope (bundle ids, sorted), nil for every topic.
        public var topics: [String]?
        /// `activate_at` (RFC 3339), or nil when the file gives none (active from its first load).
        public var activateAt: Date?
        /// `serving` (the entry's newest active key), `fallback` (the one before it, kept while a
        /// rotation is under way), `standby` (older, not used), `pending` (`activate_at` still ahead) or
        /// `in_fallback` (APNs refused it; its sends go to the fallback key: ``stateDetail`` says why).
        public var state: String
        /// Why the key is `in_fallback` (bundle id, Apple's reason, since, retry), else nil.
        public var stateDetail: String?
        /// When its last provider token was minted (its `iat`), nil before the first one.
        public var lastMintAt: Date?
        /// When APNs last refused one of its provider tokens, and Apple's reason.
        public var lastRefusalAt: Date?
        public var lastRefusalReason: String?
    }

    /// The credentials file (or `PUSH_APNS_KEY_ID` for the single-key shorthand).
    public var source: String
    /// Per app entry and key, in the file's order (an entry's keys by activation).
    public var keys: [Key]

    /// Runtime facts of one key (from its provider-token cache).
    public struct Facts: Sendable, Equatable {
        /// The last token's `iat` (seconds since the epoch).
        public var lastMintSeconds: Int64?
        /// APNs's last refusal (seconds since the epoch, Apple's reason).
        public var lastRefusalSeconds: Int64?
        public var lastRefusalReason: String?

        /// - Parameters: see the properties.
        public init(lastMintSeconds: Int64? = nil, lastRefusalSeconds: Int64? = nil, lastRefusalReason: String? = nil) {
            self.lastMintSeconds = lastMintSeconds
            self.lastRefusalSeconds = lastRefusalSeconds
            self.lastRefusalReason = lastRefusalReason
        }
    }

    /// The report of `registry` at `now`.
    /// - Parameters:
    ///   - facts: per key, its cache's facts (keys without an entry have none yet).
    ///   - fallbacks: the APNs client's keys in fallback now (`APNsClient.keysInFallback()`).
    public init(registry: CredentialsRegistry, facts: [CredentialsRegistry.KeyIdentity: Facts],
                fallbacks: [APNsKeyFallbacks.Refusal], now: Date) {
        source = registry.source
        keys = []
        for app in registry.apps {
            let active = app.keys.filter { $0.activatesAt <= now }
            for key in app.keys {
                var state: String
                if key.activatesAt > now {
                    state = "pending"
                } else if key == active.last {
                    state = "serving"
                } else if active.count >= 2, key == active[active.count - 2] {
                    state = "fallback"
                } else {
                    state = "standby"
                }
                var detail: String?
                let refused = fallbacks.first { refusal in
                    refusal.keyID == key.identity.keyID && refusal.teamID == key.identity.teamID
                        && registry.app(for: refusal.bundleID)?.entry == app.entry
                }
                if let refused {
                    state = "in_fallback"
                    detail = "APNs refused it for \(refused.bundleID) (\(refused.reason.rawValue)) since "
                        + Self.format(Date(timeIntervalSince1970: TimeInterval(refused.since) / 1000))
                        + ", \(refused.refusals) time(s): sends go to \(refused.fallbackKeyID); tried again at "
                        + Self.format(Date(timeIntervalSince1970: TimeInterval(refused.retryAt) / 1000))
                }
                let fact = facts[key.identity] ?? Facts()
                keys.append(Key(
                    bundleID: app.pattern, teamID: key.identity.teamID, keyID: key.identity.keyID,
                    environment: key.environment?.rawValue ?? "any", topics: key.topics.map { $0.sorted() },
                    activateAt: key.activationIsExplicit ? key.activatesAt : nil, state: state, stateDetail: detail,
                    lastMintAt: fact.lastMintSeconds.map { Date(timeIntervalSince1970: TimeInterval($0)) },
                    lastRefusalAt: fact.lastRefusalSeconds.map { Date(timeIntervalSince1970: TimeInterval($0)) },
                    lastRefusalReason: fact.lastRefusalReason))
            }
        }
    }

    /// The JSON the admin port answers: `{"source": …, "keys": [{"bundle_id", "team_id", "key_id",
    /// "environment", "topics" (array or null), "activate_at" (RFC 3339 or null: on load), "state",
    /// "state_detail", "last_mint_at", "last_refusal_at", "last_refusal_reason" (each a string or null)}]}`.
    public var json: String {
        var writer = JSONWriter()
        writer.beginObject()
        writer.writeKey("source")
        writer.writeString(source)
        writer.writeKey("keys")
        writer.beginArray()
        for key in keys {
            writer.beginObject()
            for (name, value) in [("bundle_id", key.bundleID), ("team_id", key.teamID), ("key_id", key.keyID),
                                  ("environment", key.environment)] {
                writer.writeKey(name)
                writer.writeString(value)
            }
            writer.writeKey("topics")
            if let topics = key.topics {
                writer.beginArray()
                for topic in topics { writer.writeString(topic) }
                writer.endArray()
            } else {
                writer.writeRaw("null")
            }
            for (name, value) in [("activate_at", key.activateAt.map(Self.format)), ("state", key.state), ("state_detail", key.stateDetail),
                                  ("last_mint_at", key.lastMintAt.map(Self.format)), ("last_refusal_at", key.lastRefusalAt.map(Self.format)),
                                  ("last_refusal_reason", key.lastRefusalReason)] {
                writer.writeKey(name)
                if let value { writer.writeString(value) } else { writer.writeRaw("null") }
            }
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// RFC 3339 in UTC, seconds precision.
    static func format(_ date: Date) -> String {
        ISO8601DateFormatter().string(from: date)
    }
}
