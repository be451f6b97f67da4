import Foundation
import ProtobufCodec
import PushDomain

/// What `PUSH_APNS_CREDENTIALS_FILE` says: which APNs token key (team, key id, `.p8` file) serves
/// which app, in which scope and from when (README "APNs credentials"). A value: parsing reads no
/// `.p8` file and ``route(bundleID:environment:now:)`` does no I/O; `CredentialsStore` loads the keys.
///
/// ```json
/// {"apps": [
///   {"bundle_id": "com.example.*",
///    "keys": [{"team_id": "TEAM000001", "key_id": "KEY0000001", "p8_file": "AuthKey_KEY0000001.p8",
///              "environment": "production", "topics": ["com.example.app"],
///              "activate_at": "2026-12-03T09:00:00Z"}]}]}
/// ```
///
/// `bundle_id` is a bundle id or a prefix ending in `*` (`*` alone: every app); the most specific
/// entry serves a bundle id (an exact one, else the longest prefix), and two entries with the same
/// `bundle_id` are refused, naming both. `environment` (`production` or `sandbox`) and `topics` (the
/// bundle ids the key may send to) are the scopes Apple gives a key; `activate_at` is RFC 3339, and
/// without it a key is active from when it was first loaded. A relative `p8_file` is relative to the
/// credentials file's folder.
public struct CredentialsRegistry: Sendable, Equatable {
    /// Which key a key entry is, for reuse across reloads: the same team, key id and `.p8` path is
    /// the same key (its pools and provider-token cache are kept).
    public struct KeyIdentity: Sendable, Hashable, CustomStringConvertible {
        /// The Team ID (`iss` of the provider token).
        public var teamID: String
        /// The Key ID (`kid`).
        public var keyID: String
        /// The `.p8` file, resolved against the credentials file's folder.
        public var p8Path: String

        /// `TEAMID/KEYID`, never key material.
        public var description: String { "\(teamID)/\(keyID)" }
    }

    /// One token key of an app.
    public struct Key: Sendable, Equatable {
        /// Team, key id and `.p8` path.
        public var identity: KeyIdentity
        /// The only environment the key may send to (Apple's environment-scoped keys); nil: both.
        public var environment: APNsEnvironment?
        /// The only bundle ids the key may send to (Apple's topic-scoped keys); nil: every bundle id
        /// of its app entry.
        public var topics: Set<String>?
        /// When the key starts serving: `activate_at`, or when it was first loaded.
        public var activatesAt: Date
        /// Whether `activate_at` was written (otherwise `activatesAt` is the first load's time).
        public var activationIsExplicit: Bool
        /// Where it is written, for messages: `apps[0] (com.example.*) keys[1] (TEAM000001/KEY0000001)`.
        public var entry: String

        /// Whether the key's scopes let it send to `bundleID` in `environment`.
        public func admits(bundleID: String, environment: APNsEnvironment) -> Bool {
            (self.environment.map { $0 == environment } ?? true) && (topics.map { $0.contains(bundleID) } ?? true)
        }

        /// `environment production, topics a,b`, or `any environment, any topic`: for messages.
        public var scopeDescription: String {
            let environment = self.environment.map { "environment \($0.rawValue)" } ?? "any environment"
            let topics = self.topics.map { "topics \($0.sorted().joined(separator: ","))" } ?? "any topic"
            return "\(environment), \(topics)"
        }
    }

    /// One app entry: a bundle id pattern and its keys, oldest activation first.
    public struct App: Sendable, Equatable {
        /// `com.example.app`, `com.example.*` or `*`.
        public var pattern: String
        /// The keys, by `activatesAt` (a tie keeps the file's order: the later entry is the newer key).
        public var keys: [Key]
        /// `apps[0] (com.example.*)`.
        public var entry: String

        /// How specifically the pattern matches `bundleID`: nil when it does not; an exact match
        /// beats every prefix, a longer prefix beats a shorter one.
        public func specificity(for bundleID: String) -> Int? {
            // Compared as UTF-8 bytes: bundle ids are ASCII (Apple: alphanumerics, hyphens, periods),
            // and String's own prefix test compares by Unicode canonical equivalence, several times
            // slower, once per notification.
            let pattern = self.pattern.utf8
            guard pattern.last == UInt8(ascii: "*") else { return pattern.elementsEqual(bundleID.utf8) ? Int.max : nil }
            let prefix = pattern.dropLast()
            return bundleID.utf8.starts(with: prefix) ? prefix.count : nil
        }
    }

    /// What serves one notification (``route(bundleID:environment:now:)``).
    public enum Route: Sendable, Equatable {
        /// The newest active key in scope serves; the one before it (in scope too) is the fallback
        /// while a rotation is under way.
        case key(Key, fallback: Key?)
        /// No key may send it; the reason names the app entry and the scopes, never key material.
        case refused(String)
    }

    /// A credentials file that cannot be used: the message names the file and the entry.
    public struct FormatError: Error, Sendable, CustomStringConvertible, Equatable {
        /// What is wrong, naming the file and the entry; never a secret.
        public let description: String
        init(_ description: String) { self.description = description }
    }

    /// The app entries, in the file's order.
    public var apps: [App]
    /// Where the registry was read from (for messages); `PUSH_APNS_KEY_ID` for the single-key shorthand.
    public var source: String

    /// A registry of the given entries.
    public init(apps: [App], source: String) {
        self.apps = apps
        self.source = source
    }

    /// Parses the credentials file's JSON.
    /// - Parameters:
    ///   - json: the file's bytes.
    ///   - file: its path, for messages and to resolve relative `p8_file` paths.
    ///   - loadedAt: the activation of keys without `activate_at`.
    /// - Throws: `FormatError` naming the file and the entry: not JSON, unknown or missing fields, a
    ///   `*` not at the end, two entries with the same `bundle_id`, a bad environment or time, a
    ///   certificate entry ("certificates are not supported by the dispatcher yet").
    public init(json: [UInt8], file: String, loadedAt: Date) throws(FormatError) {
        let document: JSONValue
        do {
            document = try JSONValue(parsing: json)
        } catch {
            throw FormatError("\(file): not JSON: \(error)")
        }
        guard case .object(let root) = document else { throw FormatError("\(file): must be a JSON object {\"apps\": [...]}") }
        var apps: [App] = []
        for member in root.members {
            guard member.key == "apps" else { throw FormatError("\(file): unknown member \(member.key) (expected apps)") }
            guard case .array(let entries) = member.value else { throw FormatError("\(file): apps must be an array") }
            let directory = (file as NSString).deletingLastPathComponent
            for (index, value) in entries.enumerated() {
                let app = try Self.app(value, at: "apps[\(index)]", file: file, directory: directory, loadedAt: loadedAt)
                if let same = apps.first(where: { $0.pattern == app.pattern }) {
                    throw FormatError("\(file): \(same.entry) and \(app.entry) both match \(app.pattern) equally; keep one entry per bundle_id")
                }
                apps.append(app)
            }
        }
        self.init(apps: apps, source: file)
    }

    /// The app entry that serves `bundleID`: the most specific match.
    public func app(for bundleID: String) -> App? {
        var best: (App, Int)?
        for app in apps {
            guard let specificity = app.specificity(for: bundleID) else { continue }
            if best.map({ specificity > $0.1 }) ?? true { best = (app, specificity) }
        }
        return best?.0
    }

    /// The key that serves a notification to `bundleID` in `environment` at `now`: among the app
    /// entry's keys whose scopes admit it and whose `activatesAt ≤ now`, the latest serves and the
    /// one before it is the fallback.
    /// - Returns: the key and fallback, or why none may send (no app entry, no key active yet, or
    ///   every active key scoped elsewhere).
    public func route(bundleID: String, environment: APNsEnvironment, now: Date) -> Route {
        guard let app = app(for: bundleID) else { return .refused("no entry of \(source) matches bundle id \(bundleID)") }
        // Keys are in activation order: walk back from the newest, without allocating (once per send).
        var current: Key?
        var anyActive = false
        for key in app.keys.reversed() where key.activatesAt <= now {
            anyActive = true
            guard key.admits(bundleID: bundleID, environment: environment) else { continue }
            if let current { return .key(current, fallback: key) }
            current = key
        }
        if let current { return .key(current, fallback: nil) }
        guard anyActive else {
            let first = app.keys.first.map { " before \($0.activatesAt)" } ?? ""
            return .refused("no key of \(app.entry) in \(source) is active\(first)")
        }
        let scopes = app.keys.filter { $0.activatesAt <= now }.map { "\($0.identity): \($0.scopeDescription)" }.joined(separator: "; ")
        return .refused("bundle id \(bundleID) in \(environment.rawValue) is outside the scope of every active key of \(app.entry) in \(source) (\(scopes))")
    }

    /// Every key entry, in the file's order.
    public var keys: [Key] { apps.flatMap(\.keys) }

    /// This registry with the activation of keys without `activate_at` taken from `previous` where
    /// the same key was already loaded: a reload does not move an unchanged key's start to now.
    public func keepingActivation(from previous: CredentialsRegistry) -> CredentialsRegistry {
        var firstSeen: [KeyIdentity: Date] = [:]
        for key in previous.keys where !key.activationIsExplicit {
            firstSeen[key.identity] = min(firstSeen[key.identity] ?? key.activatesAt, key.activatesAt)
        }
        var result = self
        for appIndex in result.apps.indices {
            for keyIndex in result.apps[appIndex].keys.indices where !result.apps[appIndex].keys[keyIndex].activationIsExplicit {
                if let date = firstSeen[result.apps[appIndex].keys[keyIndex].identity] {
                    result.apps[appIndex].keys[keyIndex].activatesAt = date
                }
            }
            result.apps[appIndex].keys = Self.byActivation(result.apps[appIndex].keys)
        }
        return result
    }

    // MARK: Parsing

    private static func byActivation(_ keys: [Key]) -> [Key] {
        keys.enumerated().sorted { ($0.element.activatesAt, $0.offset) < ($1.element.activatesAt, $1.offset) }.map(\.element)
    }

    private static func fields(_ value: JSONValue, at path: String) throws(FormatError) -> [String: JSONValue] {
        guard case .object(let object) = value else { throw FormatError("\(path) must be an object") }
        var fields: [String: JSONValue] = [:]
        for member in object.members {
            guard fields[member.key] == nil else { throw FormatError("\(path): \(member.key) appears twice") }
            fields[member.key] = member.value
        }
        return fields
    }

    private static func string(_ fields: [String: JSONValue], _ name: String, at path: String) throws(FormatError) -> String {
        guard case .string(let value)? = fields[name], !value.isEmpty else { throw FormatError("\(path): \(name) is required (a non-empty string)") }
        return value
    }

    private static func app(_ value: JSONValue, at path: String, file: String, directory: String, loadedAt: Date) throws(FormatError) -> App {
        let fields = try fields(value, at: "\(file): \(path)")
        let pattern = try string(fields, "bundle_id", at: "\(file): \(path)")
        let entry = "\(path) (\(pattern))"
        if let star = pattern.firstIndex(of: "*"), star != pattern.index(before: pattern.endIndex) {
            throw FormatError("\(file): \(entry): bundle_id may hold one * wildcard, at its end")
        }
        for name in fields.keys where name != "bundle_id" && name != "keys" {
            throw FormatError("\(file): \(entry): unknown member \(name) (expected bundle_id, keys)")
        }
        guard case .array(let values)? = fields["keys"], !values.isEmpty else {
            throw FormatError("\(file): \(entry): keys is required (a non-empty array)")
        }
        var keys: [Key] = []
        for (index, value) in values.enumerated() {
            let key = try Self.key(value, at: "\(entry) keys[\(index)]", file: file, directory: directory, loadedAt: loadedAt)
            if let same = keys.first(where: { $0.identity == key.identity }) {
                throw FormatError("\(file): \(same.entry) and \(key.entry) are the same key")
            }
            keys.append(key)
        }
        return App(pattern: pattern, keys: byActivation(keys), entry: entry)
    }

    private static let keyMembers: Set<String> = ["team_id", "key_id", "p8_file", "environment", "topics", "activate_at", "type"]
    private static let certificateMembers: Set<String> = ["certificate_file", "p12_file", "pkcs12_file", "certificate", "private_key_file"]

    private static func key(_ value: JSONValue, at path: String, file: String, directory: String, loadedAt: Date) throws(FormatError) -> Key {
        let fields = try fields(value, at: "\(file): \(path)")
        if case .string("certificate")? = fields["type"] {
            throw FormatError("\(file): \(path): certificates are not supported by the dispatcher yet (token keys only: team_id, key_id, p8_file)")
        }
        if fields.keys.contains(where: certificateMembers.contains) {
            throw FormatError("\(file): \(path): certificates are not supported by the dispatcher yet (token keys only: team_id, key_id, p8_file)")
        }
        if let type = fields["type"], type != .string("token") {
            throw FormatError("\(file): \(path): type must be \"token\"")
        }
        for name in fields.keys where !keyMembers.contains(name) {
            throw FormatError("\(file): \(path): unknown member \(name) (expected \(keyMembers.sorted().joined(separator: ", ")))")
        }
        let teamID = try string(fields, "team_id", at: "\(file): \(path)")
        let keyID = try string(fields, "key_id", at: "\(file): \(path)")
        let entry = "\(path) (\(teamID)/\(keyID))"
        let p8 = try string(fields, "p8_file", at: "\(file): \(entry)")
        let p8Path = p8.hasPrefix("/") || directory.isEmpty ? p8 : directory + "/" + p8
        var environment: APNsEnvironment?
        if let value = fields["environment"] {
            guard case .string(let text) = value, let parsed = APNsEnvironment(rawValue: text) else {
                throw FormatError("\(file): \(entry): environment must be \"production\" or \"sandbox\"")
            }
            environment = parsed
        }
        var topics: Set<String>?
        if let value = fields["topics"] {
            guard case .array(let values) = value, !values.isEmpty else {
                throw FormatError("\(file): \(entry): topics must be a non-empty array of bundle ids")
            }
            var set: Set<String> = []
            for value in values {
                guard case .string(let topic) = value, !topic.isEmpty, !topic.contains("*") else {
                    throw FormatError("\(file): \(entry): topics must hold bundle ids (non-empty strings without *)")
                }
                set.insert(topic)
            }
            topics = set
        }
        var activatesAt = loadedAt
        if let value = fields["activate_at"] {
            guard case .string(let text) = value, let date = rfc3339(text) else {
                throw FormatError("\(file): \(entry): activate_at must be an RFC 3339 time (2026-12-03T09:00:00Z)")
            }
            activatesAt = date
        }
        return Key(
            identity: KeyIdentity(teamID: teamID, keyID: keyID, p8Path: p8Path), environment: environment, topics: topics,
            activatesAt: activatesAt, activationIsExplicit: fields["activate_at"] != nil, entry: entry)
    }

    /// An RFC 3339 date-time (`2026-12-03T09:00:00Z`, `2026-12-03T10:00:00.5+01:00`), or nil.
    public static func rfc3339(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)
    }
}
