import Foundation
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// A pool whose sessions use `schema` (created when missing) as their search path, so that two
/// token stores can live in one test database and be compared.
func schemaPool(_ schema: String, maximumConnections: Int = 4) async throws -> PostgresPool {
    _ = try await TestDatabase.withConnection { try await $0.execute("CREATE SCHEMA IF NOT EXISTS \(schema)") }
    let base = try TestDatabase.url
    let url = base.hasPrefix("postgres://") || base.hasPrefix("postgresql://")
        ? base + (base.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)"
        : base + " options='-csearch_path=\(schema)'"
    let pool = PostgresPool(configuration: .init(conninfo: url, maximumConnections: maximumConnections))
    try await pool.start()
    return pool
}

/// Every column of `device_tokens` that the semantics decide (not created_at/updated_at), one
/// string per column, rows ordered by token.
func tokenRows(_ pool: PostgresPool, tokens: [String]? = nil) async throws -> [[String?]] {
    let columns = ["device_token", "bundle_id", "environment", "token_kind", "user_id", "installation_id", "status",
                   "inactive_reason", "inactive_at_ms", "last_event_at_ms", "registered_at_ms", "apns_invalidated_at_ms",
                   "attributes"]
    let rows = try await pool.query(
        "SELECT \(columns.joined(separator: ", ")) FROM device_tokens WHERE $1 = '' OR device_token = ANY($2::text[]) ORDER BY device_token",
        [.string(tokens == nil ? "" : "some"), .textArray(tokens ?? [])])
    return try rows.map { row in try columns.map { try row.string($0) } }
}

/// A deterministic generator, so that a failing sequence can be replayed from its seed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// `TokenStore.apply(_ events: [TokenEvent])` against one-by-one `apply(_:)` on a real PostgreSQL:
/// the same rows and the same count of changes, for hand-written edge cases and random sequences.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(5)))
struct TokenStoreBatchTests {
    /// Two stores in two schemas of the suite's database: `single` (one by one) and `batched`.
    final class Pair: Sendable {
        let single: TokenStore, batched: TokenStore
        let singlePool: PostgresPool, batchedPool: PostgresPool
        init() async throws {
            singlePool = try await schemaPool("single")
            batchedPool = try await schemaPool("batched")
            single = TokenStore(pool: singlePool)
            batched = TokenStore(pool: batchedPool)
            try await single.migrate()
            try await batched.migrate()
        }
        func close() async {
            await singlePool.close()
            await batchedPool.close()
        }

        /// Applies `events` one by one to `single` and in batches of `batchSizes` (cycled) to `batched`.
        /// - Returns: the changes each side counted.
        @discardableResult
        func apply(_ events: [TokenEvent], batchSizes: [Int] = [Int.max]) async throws -> (single: Int, batched: Int) {
            var singleChanged = 0
            for event in events where try await single.apply(event) { singleChanged += 1 }
            var batchedChanged = 0, start = 0, index = 0
            while start < events.count {
                let end = min(events.count, start + max(1, min(batchSizes[index % batchSizes.count], events.count)))
                batchedChanged += try await batched.apply(Array(events[start..<end]))
                start = end
                index += 1
            }
            return (singleChanged, batchedChanged)
        }

        /// The same 410 on both sides.
        func deactivate(_ token: String, invalidatedAtMs: Int64) async throws {
            let a = try await single.deactivate(token: token, reason: "Unregistered", invalidatedAtMs: invalidatedAtMs, nowMs: invalidatedAtMs)
            let b = try await batched.deactivate(token: token, reason: "Unregistered", invalidatedAtMs: invalidatedAtMs, nowMs: invalidatedAtMs)
            #expect((a == nil) == (b == nil))
        }

        func rows(_ tokens: [String]) async throws -> (single: [[String?]], batched: [[String?]]) {
            (try await tokenRows(singlePool, tokens: tokens), try await tokenRows(batchedPool, tokens: tokens))
        }

        func expectEqual(_ tokens: [String], _ sourceLocation: SourceLocation = #_sourceLocation) async throws -> [[String?]] {
            let (single, batched) = try await rows(tokens)
            #expect(single == batched, sourceLocation: sourceLocation)
            return batched
        }
    }

    static let app = "com.example.app"
    static func token() -> String { TokenStoreTests.token() }
    static func register(_ token: String, at time: Int64, user: String = "u1", installation: String = "",
                         kind: TokenKind = .standard, bundle: String = app) -> TokenEvent {
        TokenStoreTests.registered(token, at: time, user: user, installation: installation, kind: kind, bundle: bundle)
    }
    static func unregister(_ token: String, at time: Int64, bundle: String = app) -> TokenEvent {
        TokenStoreTests.unregistered(token, at: time, bundle: bundle)
    }
    static func rotate(_ token: String, from previous: String, at time: Int64, user: String = "u1", bundle: String = app) -> TokenEvent {
        var event = register(token, at: time, user: user, bundle: bundle)
        event.previousToken = previous
        return event
    }
    static func forget(_ user: String, at time: Int64, bundle: String = app) -> TokenEvent {
        TokenEvent(eventID: UUID().uuidString, action: .userForgotten, device: Device(bundleID: bundle, userID: user), eventTimeMs: time)
    }
    static func status(_ rows: [[String?]], _ token: String) -> String? {
        rows.first { $0[0] == token }?[6] ?? nil
    }
    static func column(_ rows: [[String?]], _ token: String, _ index: Int) -> String? {
        rows.first { $0[0] == token }?[index] ?? nil
    }

    @Test func anOlderEventAfterANewerOneChangesNothing() async throws {
        let pair = try await Pair()
        let t = Self.token()
        let counts = try await pair.apply([
            Self.register(t, at: 5, user: "new"), Self.register(t, at: 3, user: "old"), Self.unregister(t, at: 4),
            Self.register(t, at: 5, user: "same-time"),
        ])
        #expect(counts.single == 1 && counts.batched == 1)
        let rows = try await pair.expectEqual([t])
        #expect(Self.column(rows, t, 4) == "new" && Self.status(rows, t) == "active")
        await pair.close()
    }

    @Test func unregistrationBeforeAndAfterRegistration() async throws {
        let pair = try await Pair()
        let tombstone = Self.token(), revived = Self.token(), gone = Self.token(), otherApp = Self.token()
        let counts = try await pair.apply([
            Self.unregister(tombstone, at: 5), Self.register(tombstone, at: 4),  // late, older registration
            Self.unregister(revived, at: 5), Self.register(revived, at: 6),
            Self.register(gone, at: 1), Self.unregister(gone, at: 2),
            Self.register(otherApp, at: 1), Self.unregister(otherApp, at: 2, bundle: "com.example.other"),
        ])
        #expect(counts.single == 6 && counts.batched == 6)
        let rows = try await pair.expectEqual([tombstone, revived, gone, otherApp])
        #expect(Self.status(rows, tombstone) == "inactive" && Self.column(rows, tombstone, 7) == "unregistered")
        #expect(Self.status(rows, revived) == "active")
        #expect(Self.status(rows, gone) == "inactive")
        #expect(Self.status(rows, otherApp) == "active", "an unregistration for another app is ignored")
        await pair.close()
    }

    @Test func aNewerTokenFirstReplacesNothingLaterInTheBatch() async throws {
        // A t=5 then B t=2 for installation X: one by one B is inserted after A's replacement ran,
        // so both stay active.
        let pair = try await Pair()
        let a = Self.token(), b = Self.token()
        try await pair.apply([Self.register(a, at: 5, installation: "X"), Self.register(b, at: 2, installation: "X")])
        let rows = try await pair.expectEqual([a, b])
        #expect(Self.status(rows, a) == "active" && Self.status(rows, b) == "active")
        await pair.close()
    }

    @Test func aNewerTokenLaterReplacesTheOlderOne() async throws {
        let pair = try await Pair()
        let a = Self.token(), b = Self.token()
        try await pair.apply([Self.register(b, at: 2, installation: "X"), Self.register(a, at: 5, installation: "X")])
        let rows = try await pair.expectEqual([a, b])
        #expect(Self.status(rows, a) == "active")
        #expect(Self.status(rows, b) == "inactive" && Self.column(rows, b, 7) == "replaced" && Self.column(rows, b, 8) == "5")
        await pair.close()
    }

    @Test func aTokenMovingToAnotherInstallationInTheSameBatchStaysActive() async throws {
        let pair = try await Pair()
        let a = Self.token(), b = Self.token(), c = Self.token()
        try await pair.apply([Self.register(a, at: 1, installation: "X"), Self.register(c, at: 1, installation: "Z")])
        // B replaces X while A moves to Y (newer than A's last event): A ends active under Y, in
        // either order. C is unregistered while D's registration replaces Z: C ends unregistered.
        let d = Self.token()
        try await pair.apply([
            Self.register(b, at: 5, installation: "X"), Self.register(a, at: 3, installation: "Y"),
            Self.register(d, at: 6, installation: "Z"), Self.unregister(c, at: 4),
        ])
        var rows = try await pair.expectEqual([a, b, c, d])
        #expect(Self.status(rows, a) == "active" && Self.column(rows, a, 5) == "Y")
        #expect(Self.column(rows, c, 7) == "unregistered")
        try await pair.apply([Self.register(a, at: 10, installation: "W"), Self.register(b, at: 9, installation: "W")])
        rows = try await pair.expectEqual([a, b])
        #expect(Self.status(rows, a) == "active" && Self.status(rows, b) == "active")
        await pair.close()
    }

    @Test func appleInvalidationStillWinsOverOlderRegistrationsInABatch() async throws {
        let pair = try await Pair()
        let t = Self.token()
        try await pair.apply([Self.register(t, at: 10)])
        try await pair.deactivate(t, invalidatedAtMs: 20)
        var counts = try await pair.apply([Self.register(t, at: 15, user: "refreshed")])
        #expect(counts.single == 1 && counts.batched == 1)
        var rows = try await pair.expectEqual([t])
        #expect(Self.status(rows, t) == "inactive" && Self.column(rows, t, 4) == "refreshed")
        counts = try await pair.apply([Self.register(t, at: 16), Self.register(t, at: 25)])
        rows = try await pair.expectEqual([t])
        #expect(Self.status(rows, t) == "active")
        await pair.close()
    }

    /// Issue 13: reusing someone's installation id must not deactivate their token; the owner's own
    /// new token (or, for a device with no user, another user-less token) still replaces it.
    @Test func installationReplacementIsScopedToTheSameUser() async throws {
        let pair = try await Pair()
        let victim = Self.token(), attacker = Self.token(), rotated = Self.token(), anonymous = Self.token(), anonymous2 = Self.token()
        try await pair.apply([Self.register(victim, at: 1, user: "alice", installation: "inst-1")])
        try await pair.apply([Self.register(attacker, at: 2, user: "mallory", installation: "inst-1")])
        var rows = try await pair.expectEqual([victim, attacker])
        #expect(Self.status(rows, victim) == "active", "another user's registration must not replace alice's token")
        try await pair.apply([Self.register(rotated, at: 3, user: "alice", installation: "inst-1")])
        rows = try await pair.expectEqual([victim, attacker, rotated])
        #expect(Self.status(rows, victim) == "inactive")
        #expect(Self.status(rows, attacker) == "active")
        try await pair.apply([Self.register(anonymous, at: 4, user: "", installation: "inst-2"),
                              Self.register(anonymous2, at: 5, user: "", installation: "inst-2")])
        rows = try await pair.expectEqual([anonymous, anonymous2])
        #expect(Self.status(rows, anonymous) == "inactive" && Self.status(rows, anonymous2) == "active")
        await pair.close()
    }

    @Test func previousTokenIsReplacedOnlyForTheSameUser() async throws {
        let pair = try await Pair()
        let old = Self.token(), new = Self.token(), strangers = Self.token(), stranger = Self.token()
        try await pair.apply([Self.register(old, at: 1, user: "alice"), Self.register(strangers, at: 1, user: "bob")])
        try await pair.apply([Self.rotate(new, from: old, at: 2, user: "alice"), Self.rotate(stranger, from: strangers, at: 3, user: "mallory")],
                             batchSizes: [2])
        let rows = try await pair.expectEqual([old, new, strangers, stranger])
        #expect(Self.status(rows, old) == "inactive" && Self.status(rows, new) == "active")
        #expect(Self.status(rows, strangers) == "active", "mallory cannot retire bob's token by naming it as previous")
        await pair.close()
    }

    @Test func forgettingAUserDeactivatesEveryRowOlderThanTheForget() async throws {
        let pair = try await Pair()
        let alice = "alice-\(UUID())", bob = "bob-\(UUID())"  // the schemas are shared by the suite's tests
        let a = Self.token(), b = Self.token(), other = Self.token(), later = Self.token()
        try await pair.apply([Self.register(a, at: 1, user: alice), Self.register(b, at: 2, user: alice),
                              Self.register(other, at: 2, user: bob)])
        let counts = try await pair.apply([Self.forget(alice, at: 5), Self.register(later, at: 6, user: alice),
                                           Self.register(a, at: 4, user: alice)])  // delayed, older than the forget
        #expect(counts.single == counts.batched && counts.single == 2)
        let rows = try await pair.expectEqual([a, b, other, later])
        #expect(Self.status(rows, a) == "inactive" && Self.status(rows, b) == "inactive")
        #expect(Self.status(rows, other) == "active" && Self.status(rows, later) == "active")
        let applied = try await pair.batched.applyBatch([Self.forget(bob, at: 9)])
        #expect(applied.forgotten.map(\.deviceToken) == [other] && applied.changed == 1)
        await pair.close()
    }

    @Test func forgottenRowsAndTheirSendLogGoAfterTheRetention() async throws {
        let pair = try await Pair()
        let user = "carol-\(UUID())"
        let forgotten = Self.token(), kept = Self.token()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        try await pair.apply([Self.register(forgotten, at: now - 10_000, user: user), Self.register(kept, at: now - 10_000)])
        for token in [forgotten, kept] {
            try await pair.batchedPool.execute(
                "INSERT INTO send_log (request_id, device_token, event_id, outcome, report) VALUES ($1, $2, 'e', 'delivered', '\\x00')",
                [.string("r-\(UUID())"), .string(token)])
        }
        try await pair.batched.apply([Self.forget(user, at: now - 5_000)])
        // Within the retention nothing of this user goes. (The counts cover the whole shared table, where
        // other tests leave forgotten rows with ancient times: only this test's rows are asserted.)
        _ = try await SendLogRetention(pool: pair.batchedPool, retention: .seconds(3600)).deleteForgotten()
        #expect(try await pair.batched.tokens([forgotten, kept]).keys.sorted() == [forgotten, kept].sorted())
        #expect(try await SendLogRetention(pool: pair.batchedPool, retention: .seconds(1)).deleteForgotten() >= 1)
        #expect(try await pair.batched.tokens([forgotten, kept]).keys.sorted() == [kept])
        let logs = try await pair.batchedPool.query(
            "SELECT device_token FROM send_log WHERE device_token = ANY($1::text[])", [.string("{\(forgotten),\(kept)}")])
        #expect(try logs.map { try $0.string("device_token") } == [kept])
        await pair.close()
    }

    @Test func anInvalidTokenFailsTheWholeBatch() async throws {
        let pair = try await Pair()
        let good = Self.token()
        await #expect(throws: PostgresError.self) {
            try await pair.batched.apply([Self.register(good, at: 1), Self.register("NOT-HEX", at: 1)])
        }
        #expect(try await pair.batched.tokens([good]).isEmpty, "the transaction rolled back")
        #expect(try await pair.batched.apply([]) == 0)
        await pair.close()
    }

    /// Random sequences over a small pool of tokens, times and installation ids: a prefix applied
    /// one by one to both stores, random 410s on both, then the rest one by one against batches.
    @Test func randomSequencesGiveTheSameTableAsOneByOne() async throws {
        let pair = try await Pair()
        let seed = UInt64.random(in: 0...UInt64.max)
        var random = SplitMix64(state: seed)
        let iterations = 150
        var totalEvents = 0, totalChanged = 0
        for iteration in 0..<iterations {
            let tokens = (0..<4).map { _ in Self.token() }
            let installations = ["i\(iteration)a", "i\(iteration)b", ""]
            func event() -> TokenEvent {
                let token = tokens.randomElement(using: &random)!
                let time = Int64.random(in: 1...12, using: &random)
                switch Int.random(in: 0..<16, using: &random) {
                case 0..<4:
                    return Self.unregister(token, at: time, bundle: Int.random(in: 0..<5, using: &random) == 0 ? "com.example.other" : Self.app)
                case 4:
                    return Self.forget(["u1", "u2"].randomElement(using: &random)!, at: time)
                case 5:
                    let previous = tokens.filter { $0 != token }.randomElement(using: &random)!
                    return Self.rotate(token, from: previous, at: time, user: ["u1", "u2", ""].randomElement(using: &random)!)
                default:
                    break
                }
                return Self.register(
                    token, at: time, user: ["u1", "u2", ""].randomElement(using: &random)!,
                    installation: installations.randomElement(using: &random)!,
                    kind: Int.random(in: 0..<4, using: &random) == 0 ? .voip : .standard,
                    bundle: Int.random(in: 0..<8, using: &random) == 0 ? "com.example.other" : Self.app)
            }
            let prefix = (0..<Int.random(in: 0...6, using: &random)).map { _ in event() }
            let rest = (0..<Int.random(in: 1...24, using: &random)).map { _ in event() }
            try await pair.apply(prefix)
            for token in tokens where Int.random(in: 0..<4, using: &random) == 0 {
                try await pair.deactivate(token, invalidatedAtMs: Int64.random(in: 1...12, using: &random))
            }
            let sizes = (0..<3).map { _ in Int.random(in: 1...25, using: &random) }
            let counts = try await pair.apply(rest, batchSizes: sizes)
            let (single, batched) = try await pair.rows(tokens)
            let described = "seed \(seed), iteration \(iteration), batches \(sizes):\n"
                + rest.map {
                    "\($0.action) \(tokens.firstIndex(of: $0.device!.deviceToken).map(String.init) ?? "-") t=\($0.eventTimeMs) user=\($0.device!.userID) "
                        + "inst=\($0.device!.installationID) kind=\($0.device!.kind) bundle=\($0.device!.bundleID) "
                        + "previous=\(tokens.firstIndex(of: $0.previousToken).map(String.init) ?? "-")"
                }.joined(separator: "\n")
            #expect(counts.single == counts.batched, "\(described)")
            #expect(single == batched, "\(described)")
            if counts.single != counts.batched || single != batched { break }
            totalEvents += rest.count
            totalChanged += counts.single
        }
        print("TokenStoreBatchTests: \(iterations) random sequences, \(totalEvents) batched events, \(totalChanged) changes, seed \(seed)")
        await pair.close()
    }
}
