import APNsKeyRegistry
import DispatcherCore
import Foundation
import PushDomain
import Testing

/// `CredentialsRegistry` without I/O: the credentials file's format, what load refuses, and which
/// key serves a notification (`route`), rotation and scopes included.
@Suite struct CredentialsRegistryTests {
    static let file = "/etc/push/apns-credentials.json"
    static let loadedAt = Date(timeIntervalSince1970: 1_800_000_000)

    static func parse(_ json: String, loadedAt: Date = loadedAt) throws -> CredentialsRegistry {
        try CredentialsRegistry(json: Array(json.utf8), file: file, loadedAt: loadedAt)
    }

    static func refusal(_ json: String) -> String? {
        do {
            _ = try parse(json)
            return nil
        } catch {
            return "\(error)"
        }
    }

    static func key(_ team: String, _ key: String, _ extra: String = "") -> String {
        #"{"team_id": "\#(team)", "key_id": "\#(key)", "p8_file": "AuthKey_\#(key).p8"\#(extra)}"#
    }

    static func served(_ route: CredentialsRegistry.Route) -> (String, String?)? {
        guard case .key(let key, let fallback) = route else { return nil }
        return (key.identity.keyID, fallback?.identity.keyID)
    }

    @Test func theMostSpecificEntryServesABundleID() throws {
        let registry = try Self.parse("""
            {"apps": [{"bundle_id": "*", "keys": [\(Self.key("TEAMA00001", "KEYANY0001"))]},
                      {"bundle_id": "com.example.*", "keys": [\(Self.key("TEAMB00001", "KEYEXAMPL1"))]},
                      {"bundle_id": "com.example.mail.*", "keys": [\(Self.key("TEAMB00001", "KEYMAIL001"))]},
                      {"bundle_id": "com.example.app", "keys": [\(Self.key("TEAMC00001", "KEYAPP0001"))]}]}
            """)
        let now = Self.loadedAt
        #expect(Self.served(registry.route(bundleID: "com.example.app", environment: .production, now: now))?.0 == "KEYAPP0001")
        #expect(Self.served(registry.route(bundleID: "com.example.mail.ios", environment: .production, now: now))?.0 == "KEYMAIL001")
        #expect(Self.served(registry.route(bundleID: "com.example.app2", environment: .production, now: now))?.0 == "KEYEXAMPL1")
        #expect(Self.served(registry.route(bundleID: "org.other", environment: .sandbox, now: now))?.0 == "KEYANY0001")
        // A relative .p8 path is relative to the credentials file's folder.
        #expect(registry.keys.first?.identity.p8Path == "/etc/push/AuthKey_KEYANY0001.p8")
    }

    @Test func aBundleIDWithoutAnEntryIsRefusedNamingTheFile() throws {
        let registry = try Self.parse(#"{"apps": [{"bundle_id": "com.example.*", "keys": [\#(Self.key("TEAMA00001", "KEYA000001"))]}]}"#)
        guard case .refused(let reason) = registry.route(bundleID: "com.other.app", environment: .production, now: Self.loadedAt) else {
            Issue.record("routed a bundle id no entry matches")
            return
        }
        #expect(reason.contains(Self.file) && reason.contains("com.other.app"))
        // "com.example.*" is a prefix with its dot: "com.example" itself is not under it.
        #expect(Self.served(registry.route(bundleID: "com.example", environment: .production, now: Self.loadedAt)) == nil)
    }

    @Test func twoEntriesMatchingEquallyAreRefusedNamingBoth() {
        let message = Self.refusal("""
            {"apps": [{"bundle_id": "com.example.*", "keys": [\(Self.key("TEAMA00001", "KEYA000001"))]},
                      {"bundle_id": "com.example.*", "keys": [\(Self.key("TEAMB00001", "KEYB000001"))]}]}
            """)
        #expect(message?.contains("apps[0] (com.example.*)") == true && message?.contains("apps[1] (com.example.*)") == true)
        #expect(message?.contains(Self.file) == true)
    }

    @Test func aCertificateEntryIsRefused() {
        for entry in [#"{"type": "certificate", "p12_file": "push.p12"}"#, #"{"certificate_file": "push.pem", "private_key_file": "k.pem"}"#] {
            let message = Self.refusal(#"{"apps": [{"bundle_id": "com.example.app", "keys": [\#(entry)]}]}"#)
            #expect(message?.contains("certificates are not supported by the dispatcher yet") == true)
            #expect(message?.contains("apps[0] (com.example.app) keys[0]") == true)
        }
    }

    @Test func badEntriesAreNamedByFileAndEntry() {
        let cases: [(String, String)] = [
            ("not json", "not JSON"),
            (#"{"apps": [{"bundle_id": "com.*.app", "keys": [\#(Self.key("T", "K"))]}]}"#, "apps[0] (com.*.app): bundle_id may hold one * wildcard"),
            (#"{"apps": [{"bundle_id": "a", "keys": []}]}"#, "apps[0] (a): keys is required"),
            (#"{"apps": [{"bundle_id": "a", "keys": [{"team_id": "T", "key_id": "K"}]}]}"#, "apps[0] (a) keys[0] (T/K): p8_file is required"),
            (#"{"apps": [{"bundle_id": "a", "keys": [\#(Self.key("T", "K", #", "environment": "staging""#))]}]}"#,
             "apps[0] (a) keys[0] (T/K): environment must be"),
            (#"{"apps": [{"bundle_id": "a", "keys": [\#(Self.key("T", "K", #", "activate_at": "tomorrow""#))]}]}"#,
             "apps[0] (a) keys[0] (T/K): activate_at must be an RFC 3339 time"),
            (#"{"apps": [{"bundle_id": "a", "keys": [\#(Self.key("T", "K", #", "topics": []"#))]}]}"#, "topics must be a non-empty array"),
            (#"{"apps": [{"bundle_id": "a", "keys": [\#(Self.key("T", "K", #", "secret": "x""#))]}]}"#, "unknown member secret"),
            (#"{"apps": [{"bundle_id": "a", "keys": [\#(Self.key("T", "K")), \#(Self.key("T", "K"))]}]}"#, "are the same key"),
            (#"{"keys": []}"#, "unknown member keys"),
        ]
        for (json, expected) in cases {
            let message = Self.refusal(json)
            #expect(message?.hasPrefix(Self.file + ":") == true, "\(json)")
            #expect(message?.contains(expected) == true, "\(json): \(message ?? "accepted")")
        }
    }

    @Test func amongActiveKeysTheLatestServesAndTheOneBeforeItIsTheFallback() throws {
        // KEYOLD0001 active since load, KEYNEW0001 from 10:00, KEYNEXT001 from 11:00.
        let registry = try Self.parse("""
            {"apps": [{"bundle_id": "com.example.app", "keys": [
                \(Self.key("TEAMA00001", "KEYNEXT001", #", "activate_at": "2027-01-15T11:00:00Z""#)),
                \(Self.key("TEAMA00001", "KEYOLD0001")),
                \(Self.key("TEAMA00001", "KEYNEW0001", #", "activate_at": "2027-01-15T10:00:00+00:00""#))]}]}
            """, loadedAt: try #require(CredentialsRegistry.rfc3339("2027-01-15T08:00:00Z")))
        func at(_ time: String) throws -> (String, String?)? {
            Self.served(registry.route(bundleID: "com.example.app", environment: .production, now: try #require(CredentialsRegistry.rfc3339(time))))
        }
        #expect(try at("2027-01-15T09:59:59Z")! == ("KEYOLD0001", nil))
        #expect(try at("2027-01-15T10:00:00Z")! == ("KEYNEW0001", "KEYOLD0001"))
        #expect(try at("2027-01-15T11:30:00.250Z")! == ("KEYNEXT001", "KEYNEW0001"))
        guard case .refused(let reason) = registry.route(
            bundleID: "com.example.app", environment: .production, now: try #require(CredentialsRegistry.rfc3339("2027-01-15T07:00:00Z")))
        else {
            Issue.record("a key served before any was active")
            return
        }
        #expect(reason.contains("no key of apps[0] (com.example.app)") && reason.contains("is active"))
    }

    @Test func keysWithoutActivateAtKeepTheirFirstLoadAcrossReloads() throws {
        let first = try Self.parse(#"{"apps": [{"bundle_id": "a", "keys": [\#(Self.key("T", "KEYOLD0001"))]}]}"#)
        // An hour later the file gains a new key, also without activate_at: it is the newer one.
        let later = Self.loadedAt.addingTimeInterval(3600)
        let reloaded = try Self.parse("""
            {"apps": [{"bundle_id": "a", "keys": [\(Self.key("T", "KEYNEW0001")), \(Self.key("T", "KEYOLD0001"))]}]}
            """, loadedAt: later).keepingActivation(from: first)
        #expect(reloaded.keys.map(\.identity.keyID) == ["KEYOLD0001", "KEYNEW0001"])
        #expect(reloaded.keys.first?.activatesAt == Self.loadedAt)
        #expect(Self.served(reloaded.route(bundleID: "a", environment: .production, now: later))! == ("KEYNEW0001", "KEYOLD0001"))
        // Without the earlier load both would start now and the file's order would decide.
        let fresh = try Self.parse("""
            {"apps": [{"bundle_id": "a", "keys": [\(Self.key("T", "KEYNEW0001")), \(Self.key("T", "KEYOLD0001"))]}]}
            """, loadedAt: later)
        #expect(Self.served(fresh.route(bundleID: "a", environment: .production, now: later))! == ("KEYOLD0001", "KEYNEW0001"))
    }

    @Test func scopesDecideWhichKeySendsAndRefuseWhatNoKeyCovers() throws {
        let registry = try Self.parse("""
            {"apps": [{"bundle_id": "com.example.*", "keys": [
                \(Self.key("TEAMA00001", "KEYPROD001", #", "environment": "production""#)),
                \(Self.key("TEAMA00001", "KEYSAND001", #", "environment": "sandbox", "topics": ["com.example.app"]"#))]}]}
            """)
        let now = Self.loadedAt
        #expect(Self.served(registry.route(bundleID: "com.example.app", environment: .production, now: now))! == ("KEYPROD001", nil))
        #expect(Self.served(registry.route(bundleID: "com.example.app", environment: .sandbox, now: now))! == ("KEYSAND001", nil))
        guard case .refused(let reason) = registry.route(bundleID: "com.example.widget", environment: .sandbox, now: now) else {
            Issue.record("a bundle id outside every key's scope was routed")
            return
        }
        #expect(reason.contains("outside the scope") && reason.contains("KEYSAND001: environment sandbox, topics com.example.app"))
    }
}
