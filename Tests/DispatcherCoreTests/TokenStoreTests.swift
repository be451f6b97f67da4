import Foundation
import Postgres
import PushTestSupport
import PushMessages
import ServiceCore
import Testing

@testable import DispatcherCore

/// The token table's semantics (docs/semantics.md "Token table", "Token hygiene") on a real PostgreSQL:
/// an older event never overwrites a newer one, a new token of an installation replaces the old
/// one, and Apple's 410 never wins over a newer registration.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(1)))
struct TokenStoreTests {
    static func store() async throws -> (TokenStore, PostgresPool) {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 4))
        try await pool.start()
        let store = TokenStore(pool: pool)
        try await store.migrate()
        return (store, pool)
    }

    static func token() -> String {
        (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    static func registered(_ token: String, at time: Int64, user: String = "u1", installation: String = "",
                           kind: TokenKind = .standard, environment: Environment = .sandbox,
                           bundle: String = "com.example.app") -> TokenEvent {
        var device = Device()
        device.deviceToken = token
        device.bundleID = bundle
        device.environment = environment
        device.kind = kind
        device.userID = user
        device.installationID = installation
        return TokenEvent(eventID: UUID().uuidString, action: .registered, device: device, eventTimeMs: time)
    }

    static func unregistered(_ token: String, at time: Int64, bundle: String = "com.example.app") -> TokenEvent {
        var device = Device()
        device.deviceToken = token
        device.bundleID = bundle
        return TokenEvent(eventID: UUID().uuidString, action: .unregistered, device: device, eventTimeMs: time)
    }

    @Test func anOlderEventNeverOverwritesANewerOne() async throws {
        let (store, pool) = try await Self.store()
        let token = Self.token()
        #expect(try await store.apply(Self.registered(token, at: 2_000, user: "new-owner")))
        // A replayed, older registration and an older unregistration change nothing.
        #expect(try await !store.apply(Self.registered(token, at: 1_000, user: "old-owner")))
        #expect(try await !store.apply(Self.unregistered(token, at: 1_500)))
        var row = try #require(try await store.tokens([token])[token])
        #expect(row.userID == "new-owner" && row.isActive)
        // A newer unregistration wins; a registration older than it cannot resurrect the token.
        #expect(try await store.apply(Self.unregistered(token, at: 3_000)))
        #expect(try await !store.apply(Self.registered(token, at: 2_500)))
        row = try #require(try await store.tokens([token])[token])
        #expect(!row.isActive)
        #expect(try await store.apply(Self.registered(token, at: 4_000)))
        #expect(try #require(try await store.tokens([token])[token]).isActive)
        await pool.close()
    }

    @Test func anUnregistrationBeforeTheRegistrationLeavesATombstone() async throws {
        let (store, pool) = try await Self.store()
        let token = Self.token()
        #expect(try await store.apply(Self.unregistered(token, at: 5_000)))
        #expect(try await !store.apply(Self.registered(token, at: 4_000)), "an older registration arrived late")
        #expect(try await store.activeTokens(userIDs: ["u1"], bundleID: "com.example.app", kinds: ["standard"], environment: nil)
            .allSatisfy { $0.deviceToken != token })
        await pool.close()
    }

    @Test func aNewTokenOfTheSameInstallationReplacesTheOldOneOfItsKind() async throws {
        let (store, pool) = try await Self.store()
        let user = "user-\(UUID())"
        let old = Self.token(), new = Self.token(), voip = Self.token()
        try await store.apply(Self.registered(old, at: 1_000, user: user, installation: "phone"))
        try await store.apply(Self.registered(voip, at: 1_100, user: user, installation: "phone", kind: .voip))
        try await store.apply(Self.registered(new, at: 2_000, user: user, installation: "phone"))
        let standard = try await store.activeTokens(userIDs: [user], bundleID: "com.example.app", kinds: ["standard"], environment: nil)
        #expect(standard.map(\.deviceToken) == [new])
        let voipTokens = try await store.activeTokens(userIDs: [user], bundleID: "com.example.app", kinds: ["voip"], environment: nil)
        #expect(voipTokens.map(\.deviceToken) == [voip], "a token of another kind is not replaced")
        await pool.close()
    }

    @Test func fanOutFiltersByAppEnvironmentKindAndStatus() async throws {
        let (store, pool) = try await Self.store()
        // User ids with characters that matter in PostgreSQL array literals.
        let user = #"o'brien, "the" {user} \ 1"#
        let sandbox = Self.token(), production = Self.token(), otherApp = Self.token(), gone = Self.token()
        try await store.apply(Self.registered(sandbox, at: 1, user: user, environment: .sandbox))
        try await store.apply(Self.registered(production, at: 1, user: user, environment: .production))
        try await store.apply(Self.registered(otherApp, at: 1, user: user, bundle: "com.example.other"))
        try await store.apply(Self.registered(gone, at: 1, user: user))
        try await store.apply(Self.unregistered(gone, at: 2))
        let both = try await store.activeTokens(userIDs: [user, "nobody"], bundleID: "com.example.app", kinds: ["standard"], environment: nil)
        #expect(Set(both.map(\.deviceToken)) == [sandbox, production])
        let onlySandbox = try await store.activeTokens(userIDs: [user], bundleID: "com.example.app", kinds: ["standard"], environment: .sandbox)
        #expect(onlySandbox.map(\.deviceToken) == [sandbox])
        #expect(onlySandbox.first?.environment == .sandbox)
        #expect(try await store.activeTokens(userIDs: [user], bundleID: "com.example.app", kinds: ["voip"], environment: nil).isEmpty)
        await pool.close()
    }

    @Test func apples410DeactivatesOnlyWhenNewerThanTheLastRegistration() async throws {
        let (store, pool) = try await Self.store()
        let token = Self.token()
        try await store.apply(Self.registered(token, at: 10_000))
        // Apple invalidated it before the app registered again: keep it.
        #expect(try await store.deactivate(token: token, reason: "Unregistered", invalidatedAtMs: 9_000, nowMs: 11_000) == nil)
        #expect(try #require(try await store.tokens([token])[token]).isActive)
        // Apple invalidated it after the last registration: deactivate, once.
        #expect(try await store.deactivate(token: token, reason: "Unregistered", invalidatedAtMs: 12_000, nowMs: 12_500) != nil)
        #expect(try await store.deactivate(token: token, reason: "Unregistered", invalidatedAtMs: 12_000, nowMs: 12_600) == nil)
        // A registration older than Apple's timestamp does not bring it back; a newer one does.
        try await store.apply(Self.registered(token, at: 11_500))
        #expect(try #require(try await store.tokens([token])[token]).isActive == false)
        try await store.apply(Self.registered(token, at: 13_000))
        #expect(try #require(try await store.tokens([token])[token]).isActive)
        await pool.close()
    }

    @Test func theEnvironmentIsCorrectedOnlyWhenNoNewerRegistrationChangedTheRow() async throws {
        let (store, pool) = try await Self.store()
        // Registered as production at t=10,000; the notification was first sent at t=12,000.
        let token = Self.token()
        try await store.apply(Self.registered(token, at: 10_000, environment: .production))
        #expect(try await store.correctEnvironment(token: token, from: .production, to: .sandbox, refusedSinceMs: 12_000))
        var row = try #require(try await store.tokens([token])[token])
        #expect(row.environment == .sandbox && row.isActive)
        // Corrected once: a second correction from production finds nothing to change.
        #expect(try await !store.correctEnvironment(token: token, from: .production, to: .sandbox, refusedSinceMs: 12_000))
        // last_event_at_ms was left alone: a newer registration (even as production again) still applies.
        #expect(try await store.apply(Self.registered(token, at: 10_500, environment: .production)))
        #expect(try #require(try await store.tokens([token])[token]).environment == .production)

        // The app registered again at or after the first send: its registration wins, the row stays.
        let fresh = Self.token()
        try await store.apply(Self.registered(fresh, at: 12_000, environment: .production))
        #expect(try await !store.correctEnvironment(token: fresh, from: .production, to: .sandbox, refusedSinceMs: 12_000))
        row = try #require(try await store.tokens([fresh])[fresh])
        #expect(row.environment == .production)

        // An inactive row (unregistered meanwhile) is neither corrected nor brought back.
        let gone = Self.token()
        try await store.apply(Self.registered(gone, at: 10_000, environment: .production))
        try await store.apply(Self.unregistered(gone, at: 11_000))
        #expect(try await !store.correctEnvironment(token: gone, from: .production, to: .sandbox, refusedSinceMs: 12_000))
        row = try #require(try await store.tokens([gone])[gone])
        #expect(row.environment == .production && !row.isActive)

        // A token the table never saw: nothing to correct.
        #expect(try await !store.correctEnvironment(token: Self.token(), from: .production, to: .sandbox, refusedSinceMs: 12_000))
        await pool.close()
    }

    @Test func theSendLogRecordsEachOutcomeOnce() async throws {
        let (store, pool) = try await Self.store()
        var report = DeliveryReport()
        report.requestID = "req-1"
        report.deviceToken = Self.token()
        report.eventID = "event-1"
        report.outcome = .delivered
        report.httpStatus = 200
        let bytes = FeedbackEvent(eventID: "event-1", event: .deliveryReport(report)).serializedBytes()
        #expect(try await store.recordOutcome(report, event: bytes))
        var again = report
        again.eventID = "event-2"
        #expect(try await !store.recordOutcome(again, event: [1, 2, 3]))
        let recorded = try await store.recordedOutcomes(requestID: "req-1")
        #expect(recorded == [report.deviceToken: bytes])
        await pool.close()
    }
}
