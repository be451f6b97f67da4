import Foundation
import Postgres
import PushMessages
import PushTestSupport
import Testing

@testable import DispatcherCore

/// Apps own their tokens (`TokenOwnership`, README "Contracts"): a registration never moves an active
/// row to another bundle id, nor an inactive one younger than `PUSH_TOKEN_REBIND_AFTER_DAYS`; moving a
/// token between users of the same app stays allowed. Before, the upsert moved the row to whichever
/// app registered it last, so app A's credential could take app B's token away.
@Suite struct TokenOwnershipDecisionTests {
    let day: Int64 = 86_400_000

    @Test func theRuleOnRowsAndTimes() {
        let ownership = TokenOwnership(rebindAfterDays: 30)
        let now: Int64 = 1_800_000_000_000
        func allows(_ row: TokenOwnership.Row?, _ ownership: TokenOwnership = ownership, at time: Int64 = now) -> Bool {
            ownership.allows(row, bundleID: "a", eventTimeMs: time)
        }
        let allowed1 = allows(nil)
        #expect(allowed1)
        let allowed2 = allows(.init(bundleID: "a", isActive: true, inactiveSinceMs: 0))
        #expect(allowed2)
        let refused1 = allows(.init(bundleID: "b", isActive: true, inactiveSinceMs: 0))
        #expect(!refused1)
        let refused2 = allows(.init(bundleID: "b", isActive: false, inactiveSinceMs: now - 30 * day + 1))
        #expect(!refused2)
        let allowed3 = allows(.init(bundleID: "b", isActive: false, inactiveSinceMs: now - 30 * day))
        #expect(allowed3)
        let allowed4 = allows(.init(bundleID: "b", isActive: false, inactiveSinceMs: now), TokenOwnership(rebindAfterDays: 0))
        #expect(allowed4)
        // No number traps: the extremes of the event time and the setting.
        for time in [Int64.min, -1, 0, Int64.max] {
            for days in [Int.min, -1, 0, 30, Int.max] {
                _ = TokenOwnership(rebindAfterDays: days).allows(.init(bundleID: "b", isActive: false, inactiveSinceMs: .min), bundleID: "a", eventTimeMs: time)
            }
        }
        let refused3 = allows(.init(bundleID: "b", isActive: false, inactiveSinceMs: .min), TokenOwnership(rebindAfterDays: Int.max), at: .max)
        #expect(!refused3)
        let refused4 = allows(.init(bundleID: "b", isActive: false, inactiveSinceMs: .min), TokenOwnership(rebindAfterDays: 30), at: .min)
        #expect(!refused4)
    }
}

@Suite(.testDatabase, .serialized, .timeLimit(.minutes(1)))
struct TokenOwnershipStoreTests {
    static let day: Int64 = 86_400_000
    static let appA = "com.example.a", appB = "com.example.b"

    /// Runs `body` once with events applied one by one and once in one batch.
    func bothWays(_ body: (_ apply: ([TokenEvent]) async throws -> TokenEventsApplied, _ store: TokenStore) async throws -> Void) async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 4))
        try await pool.start()
        let store = TokenStore(pool: pool)
        try await store.migrate()
        try await body({ events in
            var total = TokenEventsApplied()
            for event in events {
                let applied = try await store.applyOne(event)
                total.changed += applied.changed
                total.refused += applied.refused
            }
            return total
        }, store)
        try await body({ events in try await store.applyBatch(events) }, store)
        await pool.close()
    }

    @Test func anotherAppsRegistrationOfAnActiveTokenIsRefused() async throws {
        try await bothWays { apply, store in
            let token = TokenStoreTests.token()
            _ = try await apply([TokenStoreTests.registered(token, at: 1_000, user: "bob", bundle: Self.appB)])
            let applied = try await apply([TokenStoreTests.registered(token, at: 2_000, user: "mallory", bundle: Self.appA)])
            #expect(applied.changed == 0)
            #expect(applied.refused == [.init(deviceToken: token, bundleID: Self.appA, ownerBundleID: Self.appB, eventTimeMs: 2_000)])
            let row = try #require(try await store.tokens([token])[token])
            #expect(row.bundleID == Self.appB && row.userID == "bob" && row.isActive)
            // App B's own registrations go on, and a move between users of app B is the sign-in flow.
            let again = try await apply([TokenStoreTests.registered(token, at: 3_000, user: "carol", bundle: Self.appB)])
            #expect(again.changed == 1 && again.refused.isEmpty)
            #expect(try await store.tokens([token])[token]?.userID == "carol")
        }
    }

    @Test func anInactiveRowMovesOnlyAfterTheRebindPeriod() async throws {
        try await bothWays { apply, store in
            let token = TokenStoreTests.token()
            let start: Int64 = 1_800_000_000_000
            _ = try await apply([
                TokenStoreTests.registered(token, at: start, bundle: Self.appB),
                TokenStoreTests.unregistered(token, at: start + 1, bundle: Self.appB),
            ])
            let early = try await apply([TokenStoreTests.registered(token, at: start + 1 + 30 * Self.day - 1, bundle: Self.appA)])
            #expect(early.refused.count == 1 && early.changed == 0)
            #expect(try await store.tokens([token])[token]?.bundleID == Self.appB)
            let late = try await apply([TokenStoreTests.registered(token, at: start + 1 + 30 * Self.day, bundle: Self.appA)])
            #expect(late.refused.isEmpty && late.changed == 1)
            let row = try #require(try await store.tokens([token])[token])
            #expect(row.bundleID == Self.appA && row.isActive)
        }
    }

    /// In one batch: the refused registration is taken out, the others of the batch apply.
    @Test func aBatchAppliesEverythingButTheRefusedRegistration() async throws {
        try await bothWays { apply, store in
            let owned = TokenStoreTests.token(), fresh = TokenStoreTests.token()
            _ = try await apply([TokenStoreTests.registered(owned, at: 1_000, bundle: Self.appB)])
            let applied = try await apply([
                TokenStoreTests.registered(owned, at: 2_000, bundle: Self.appA),
                TokenStoreTests.registered(fresh, at: 2_000, bundle: Self.appA),
                TokenStoreTests.registered(owned, at: 2_500, user: "u2", bundle: Self.appB),
            ])
            #expect(applied.refused.map(\.deviceToken) == [owned])
            #expect(applied.changed == 2)
            let rows = try await store.tokens([owned, fresh])
            #expect(rows[owned]?.bundleID == Self.appB && rows[owned]?.userID == "u2")
            #expect(rows[fresh]?.bundleID == Self.appA)
        }
    }
}
