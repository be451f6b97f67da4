import APNs
import APNsKeyRegistry
import DispatcherCore
import Foundation
import PushTestSupport
import ServiceCore
import Testing

/// `CredentialsStore` with real `.p8` files made by openssl: every key loaded at start and by
/// `--check-config`, errors naming the file and the entry, reloads that keep unchanged keys' caches
/// (hence their connection pools) and keep the registry in use when the new file is bad.
@Suite struct CredentialsStoreTests {
    /// A folder with `count` fresh P-256 `.p8` keys, `key0.p8`, `key1.p8`, …
    static func keys(_ count: Int) async throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-credentials-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for index in 0..<count {
            let p8 = directory.appendingPathComponent("key\(index).p8").path
            let made = try await runProgram(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p8])
            try #require(made.status == 0, "openssl: \(made.output)")
        }
        return directory
    }

    static func write(_ json: String, to file: URL) throws {
        try json.write(to: file, atomically: true, encoding: .utf8)
    }

    static func entry(_ team: String, _ key: String, _ p8: String) -> String {
        #"{"team_id": "\#(team)", "key_id": "\#(key)", "p8_file": "\#(p8)"}"#
    }

    static func cache(_ choice: CredentialsStore.Choice) -> APNsProviderTokenCache? {
        guard case .send(.token(let cache), _) = choice else { return nil }
        return cache
    }

    @Test func twoTeamsLoadAndReloadsKeepUnchangedKeys() async throws {
        let directory = try await Self.keys(3)
        let file = directory.appendingPathComponent("credentials.json")
        try Self.write("""
            {"apps": [{"bundle_id": "com.teama.*", "keys": [\(Self.entry("TEAMA00001", "KEYA000001", "key0.p8"))]},
                      {"bundle_id": "com.teamb.app", "keys": [\(Self.entry("TEAMB00001", "KEYB000001", "key1.p8"))]}]}
            """, to: file)
        let store = try CredentialsStore(file: file.path)
        let teamA = try #require(Self.cache(store.choose(bundleID: "com.teama.mail", environment: .production)))
        let teamB = try #require(Self.cache(store.choose(bundleID: "com.teamb.app", environment: .sandbox)))
        #expect((teamA.teamID, teamA.keyID, teamB.teamID, teamB.keyID) == ("TEAMA00001", "KEYA000001", "TEAMB00001", "KEYB000001"))
        guard case .refused(let reason) = store.choose(bundleID: "com.teamc.app", environment: .production) else {
            Issue.record("a bundle id without a credential was given one")
            return
        }
        #expect(reason.contains(file.path))

        // Team B's key rotates: a second key is added; team A's entry is unchanged.
        try Self.write("""
            {"apps": [{"bundle_id": "com.teama.*", "keys": [\(Self.entry("TEAMA00001", "KEYA000001", "key0.p8"))]},
                      {"bundle_id": "com.teamb.app", "keys": [\(Self.entry("TEAMB00001", "KEYB000001", "key1.p8")),
                                                             \(Self.entry("TEAMB00001", "KEYB000002", "key2.p8"))]}]}
            """, to: file)
        #expect(store.reload())
        #expect(Self.cache(store.choose(bundleID: "com.teama.mail", environment: .production)) === teamA)
        guard case .send(.token(let current), .token(let fallback)?) = store.choose(bundleID: "com.teamb.app", environment: .production) else {
            Issue.record("the rotated app has no current key and fallback")
            return
        }
        #expect(current.keyID == "KEYB000002" && fallback === teamB)
    }

    /// What a reload hands over to be drained (`APNsClient.drain(_:)`): the caches of keys the file no
    /// longer holds or whose `.p8` changed, once each; nothing for a reload that keeps every key or fails.
    @Test func aReloadReportsTheKeysItRemoved() async throws {
        let directory = try await Self.keys(3)
        let file = directory.appendingPathComponent("credentials.json")
        let both = """
            {"apps": [{"bundle_id": "com.teama.*", "keys": [\(Self.entry("TEAMA00001", "KEYA000001", "key0.p8")),
                                                           \(Self.entry("TEAMA00001", "KEYA000002", "key1.p8"))]},
                      {"bundle_id": "com.teamb.app", "keys": [\(Self.entry("TEAMA00001", "KEYA000001", "key0.p8"))]}]}
            """
        try Self.write(both, to: file)
        let store = try CredentialsStore(file: file.path)
        guard case .send(.token(let first), .token(let second)?) = store.choose(bundleID: "com.teama.mail", environment: .production) else {
            Issue.record("no current key and fallback")
            return
        }
        let older = try #require([first, second].first { $0.keyID == "KEYA000001" })
        let newer = try #require([first, second].first { $0.keyID == "KEYA000002" })
        var removed: [APNsCredentials] = []
        #expect(store.reload { removed += $0 })
        #expect(removed.isEmpty, "an unchanged file removes nothing")

        // The rotation ends: the old key leaves the file (it served two entries: reported once).
        try Self.write(#"{"apps": [{"bundle_id": "com.teama.*", "keys": [\#(Self.entry("TEAMA00001", "KEYA000002", "key1.p8"))]}]}"#, to: file)
        #expect(store.reload { removed += $0 })
        #expect(removed.compactMap { if case .token(let cache) = $0 { cache } else { nil } }.map(ObjectIdentifier.init) == [ObjectIdentifier(older)])
        #expect(Self.cache(store.choose(bundleID: "com.teama.mail", environment: .production)) === newer)

        // A bad file removes nothing; a replaced .p8 under the same key id reports the old cache.
        removed = []
        try Self.write("{", to: file)
        #expect(!store.reload { removed += $0 })
        try FileManager.default.removeItem(at: directory.appendingPathComponent("key1.p8"))
        try FileManager.default.copyItem(at: directory.appendingPathComponent("key2.p8"), to: directory.appendingPathComponent("key1.p8"))
        try Self.write(#"{"apps": [{"bundle_id": "com.teama.*", "keys": [\#(Self.entry("TEAMA00001", "KEYA000002", "key1.p8"))]}]}"#, to: file)
        #expect(store.reload { removed += $0 })
        #expect(removed.compactMap { if case .token(let cache) = $0 { cache } else { nil } }.map(ObjectIdentifier.init) == [ObjectIdentifier(newer)])
        #expect(Self.cache(store.choose(bundleID: "com.teama.mail", environment: .production)) !== newer)
    }

    @Test func aBadKeyIsNamedByFileAndEntryAndABadReloadKeepsTheRegistry() async throws {
        let directory = try await Self.keys(1)
        try "not a key\n".write(to: directory.appendingPathComponent("bad.p8"), atomically: true, encoding: .utf8)
        let file = directory.appendingPathComponent("credentials.json")
        let bad = """
            {"apps": [{"bundle_id": "com.example.app", "keys": [\(Self.entry("TEAMA00001", "KEYA000001", "key0.p8"))]},
                      {"bundle_id": "com.example.*", "keys": [\(Self.entry("TEAMB00001", "KEYB000001", "bad.p8")),
                                                             \(Self.entry("TEAMB00001", "KEYB000002", "missing.p8"))]}]}
            """
        try Self.write(bad, to: file)
        #expect {
            try CredentialsStore(file: file.path)
        } throws: { error in
            let text = "\(error)"
            return text.contains("\(file.path): apps[1] (com.example.*) keys[0] (TEAMB00001/KEYB000001): \(directory.path)/bad.p8: the .p8 key is truncated")
                && text.contains("\(file.path): apps[1] (com.example.*) keys[1] (TEAMB00001/KEYB000002): cannot read the .p8 file")
        }

        try Self.write(#"{"apps": [{"bundle_id": "com.example.app", "keys": [\#(Self.entry("TEAMA00001", "KEYA000001", "key0.p8"))]}]}"#, to: file)
        let store = try CredentialsStore(file: file.path)
        let kept = try #require(Self.cache(store.choose(bundleID: "com.example.app", environment: .production)))
        try Self.write(bad, to: file)
        #expect(!store.reload())
        #expect(Self.cache(store.choose(bundleID: "com.example.app", environment: .production)) === kept)
    }

    @Test func aChangedFileIsReloadedByTheWatch() async throws {
        let directory = try await Self.keys(2)
        let file = directory.appendingPathComponent("credentials.json")
        try Self.write(#"{"apps": [{"bundle_id": "a.b", "keys": [\#(Self.entry("TEAMA00001", "KEYA000001", "key0.p8"))]}]}"#, to: file)
        let store = try CredentialsStore(file: file.path)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await FileReloadWatch.run(file: file.path, every: .milliseconds(20)) { store.reload() } }
            // Written at every check: the watch takes its first look when its task starts, which may
            // be after a single write.
            try await eventually("the watch reloads the changed file") {
                try Self.write("""
                    {"apps": [{"bundle_id": "a.b", "keys": [\(Self.entry("TEAMA00001", "KEYA000001", "key0.p8"))]},
                              {"bundle_id": "c.d", "keys": [\(Self.entry("TEAMB00001", "KEYB000001", "key1.p8"))]}]}
                    """, to: file)
                return Self.cache(store.choose(bundleID: "c.d", environment: .production))?.keyID == "KEYB000001"
            }
            group.cancelAll()
        }
    }

    @Test func checkConfigLoadsEveryKeyAndRefusesBothFormsAtOnce() async throws {
        let directory = try await Self.keys(1)
        try "not a key\n".write(to: directory.appendingPathComponent("bad.p8"), atomically: true, encoding: .utf8)
        let file = directory.appendingPathComponent("credentials.json")
        try Self.write(#"{"apps": [{"bundle_id": "*", "keys": [\#(Self.entry("TEAMA00001", "KEYA000001", "bad.p8"))]}]}"#, to: file)
        let loaded = DispatcherProgram.main.loadSettings(environment: ["PUSH_APNS_CREDENTIALS_FILE": file.path])
        #expect(loaded.environment.errors.map(\.variable) == ["PUSH_APNS_CREDENTIALS_FILE"])
        #expect(loaded.environment.errors.first?.problem.contains("\(file.path): apps[0] (*) keys[0] (TEAMA00001/KEYA000001)") == true)

        try Self.write(#"{"apps": [{"bundle_id": "*", "keys": [\#(Self.entry("TEAMA00001", "KEYA000001", "key0.p8"))]}]}"#, to: file)
        let good = DispatcherProgram.main.loadSettings(environment: ["PUSH_APNS_CREDENTIALS_FILE": file.path])
        #expect(good.environment.errors.isEmpty && good.launch != nil)
        let both = DispatcherProgram.main.loadSettings(environment: [
            "PUSH_APNS_CREDENTIALS_FILE": file.path, "PUSH_APNS_KEY_ID": "KEYA000001", "PUSH_APNS_TEAM_ID": "TEAMA00001",
            "PUSH_APNS_KEY_FILE": directory.appendingPathComponent("key0.p8").path,
        ])
        #expect(both.environment.errors.map(\.variable) == ["PUSH_APNS_CREDENTIALS_FILE"])
        #expect(both.environment.errors.first?.problem.contains("not both") == true)
    }
}
