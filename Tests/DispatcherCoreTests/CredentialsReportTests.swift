import APNs
import APNsKeyRegistry
import Foundation
import PushTestSupport
import Testing

/// `CredentialsReport`, the dispatcher's `GET /v1/credentials`: each key's state among its app entry's
/// keys, the APNs client's fallback shown as `in_fallback` with why, the last mint and last refusal the
/// caches hold, and a JSON without key material. A value, tested without I/O.
@Suite struct CredentialsReportTests {
    static let json = """
        {"apps": [{"bundle_id": "com.example.*", "keys": [
                    {"team_id": "TEAMA00001", "key_id": "KEYA000001", "p8_file": "a.p8", "activate_at": "2026-01-01T00:00:00Z"},
                    {"team_id": "TEAMA00001", "key_id": "KEYA000002", "p8_file": "a2.p8", "activate_at": "2026-06-01T00:00:00Z"},
                    {"team_id": "TEAMA00001", "key_id": "KEYA000003", "p8_file": "a3.p8", "activate_at": "2026-12-01T00:00:00Z"},
                    {"team_id": "TEAMA00001", "key_id": "KEYA000004", "p8_file": "a4.p8", "activate_at": "2030-01-01T00:00:00Z"}]},
                  {"bundle_id": "com.acquired.app", "keys": [
                    {"team_id": "TEAMB00001", "key_id": "KEYB000001", "p8_file": "/keys/b.p8", "environment": "production",
                     "topics": ["com.acquired.app"]}]}]}
        """

    @Test func eachKeyHasItsStateLastMintAndLastRefusal() throws {
        let now = try #require(CredentialsRegistry.rfc3339("2027-01-01T00:00:00Z"))
        let registry = try CredentialsRegistry(json: Array(Self.json.utf8), file: "/etc/push/credentials.json", loadedAt: now)
        let keys = registry.keys
        let newest = try #require(keys.first { $0.identity.keyID == "KEYA000003" }).identity
        let acquired = try #require(keys.first { $0.identity.keyID == "KEYB000001" }).identity
        // The newest key of com.example.* was refused for com.example.mail: its sends go to KEYA000002.
        var fallbacks = APNsKeyFallbacks(retryDelay: .seconds(60))
        let since = Int64(now.timeIntervalSince1970 * 1000) - 5_000
        fallbacks.refuse(key: ObjectIdentifier(NSObject()), keyID: "KEYA000003", teamID: "TEAMA00001", bundleID: "com.example.mail",
                         fallbackKeyID: "KEYA000002", reason: .invalidProviderToken, now: since)
        let facts: [CredentialsRegistry.KeyIdentity: CredentialsReport.Facts] = [
            newest: .init(lastMintSeconds: Int64(now.timeIntervalSince1970) - 60, lastRefusalSeconds: Int64(now.timeIntervalSince1970) - 5,
                          lastRefusalReason: "InvalidProviderToken"),
            acquired: .init(lastMintSeconds: Int64(now.timeIntervalSince1970) - 600),
        ]
        let report = CredentialsReport(registry: registry, facts: facts, fallbacks: fallbacks.refusals, now: now)

        #expect(report.keys.map { "\($0.bundleID) \($0.keyID) \($0.state)" } == [
            "com.example.* KEYA000001 standby", "com.example.* KEYA000002 fallback", "com.example.* KEYA000003 in_fallback",
            "com.example.* KEYA000004 pending", "com.acquired.app KEYB000001 serving",
        ])
        let refused = report.keys[2]
        #expect(refused.stateDetail == "APNs refused it for com.example.mail (InvalidProviderToken) since 2026-12-31T23:59:55Z, 1 time(s): "
            + "sends go to KEYA000002; tried again at 2027-01-01T00:00:55Z")
        #expect(refused.lastRefusalReason == "InvalidProviderToken" && refused.lastRefusalAt == now.addingTimeInterval(-5))
        #expect(report.keys[4].lastMintAt == now.addingTimeInterval(-600) && report.keys[4].lastRefusalAt == nil)
        #expect(report.keys[0].lastMintAt == nil, "a key never used has minted nothing")

        // The JSON: every field of every key, null where unknown; paths and key material never.
        guard let object = try JSONSerialization.jsonObject(with: Data(report.json.utf8)) as? [String: Any],
              let listed = object["keys"] as? [[String: Any]]
        else { throw TestFailure("not the report's JSON: \(report.json)") }
        #expect(listed.count == 5)
        #expect(report.json.contains(#""source":"/etc/push/credentials.json""#))
        #expect(report.json.contains(#"{"bundle_id":"com.acquired.app","team_id":"TEAMB00001","key_id":"KEYB000001","environment":"production","topics":["com.acquired.app"],"activate_at":null,"state":"serving","state_detail":null,"last_mint_at":"2026-12-31T23:50:00Z","last_refusal_at":null,"last_refusal_reason":null}"#))
        #expect(!report.json.contains(".p8"))
    }
}
