import Foundation
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// The `channels` table on a real PostgreSQL (docs/live-activities.md "Quota before Apple"): the
/// quota counted and the `creating` row written in one transaction under the app's advisory lock.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(3)))
struct ChannelStoreTests {
    static func store(connections: Int = 12) async throws -> (ChannelStore, PostgresPool) {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: connections))
        try await pool.start()
        try await TokenStore(pool: pool).migrate()
        _ = try await pool.execute("DELETE FROM channels")
        return (ChannelStore(pool: pool), pool)
    }

    static func create(_ name: String, bundleID: String = "com.example.scores", environment: Environment = .production) -> ChannelCommand {
        var command = ChannelCommand()
        command.action = .create
        command.bundleID = bundleID
        command.environment = environment
        command.name = name
        return command
    }

    /// Ten creates of one app at once, each on its own connection (as ten replicas would), with a
    /// limit of 5: exactly five rows are written and five refused. Without the advisory lock, each
    /// transaction counts the rows committed before it and several pass at 4.
    @Test func concurrentCreatesNeverPassTheLimit() async throws {
        let (store, pool) = try await Self.store()
        try await withAsyncCleanup {
            for round in 0..<3 {
                _ = try await pool.execute("DELETE FROM channels")
                let results = try await withThrowingTaskGroup(of: ChannelStore.Reservation.self) { group in
                    for index in 0..<10 {
                        group.addTask { try await store.reserve(Self.create("r\(round)-c\(index)"), limit: 5, nowMs: 1) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                let reserved = results.filter { if case .reserved = $0 { true } else { false } }.count
                let refused = results.filter { if case .overLimit = $0 { true } else { false } }.count
                #expect(reserved == 5 && refused == 5, "round \(round): \(reserved) reserved, \(refused) refused")
                let rows = try await pool.query("SELECT count(*) AS count FROM channels")
                #expect(try rows.first?.int64("count") == 5)
            }
            // The other environment and another app have limits of their own.
            #expect(try await store.reserve(Self.create("x", environment: .sandbox), limit: 5, nowMs: 1) != .overLimit(count: 0))
            if case .overLimit = try await store.reserve(Self.create("y", bundleID: "com.example.other"), limit: 5, nowMs: 1) {
                Issue.record("another app was counted against this one's limit")
            }
        } cleanup: {
            await pool.close()
        }
    }

    /// Apple's real limit: 10,000 channels, the 10,001st refused; a deleted one frees its place.
    @Test func theRealLimitOfTenThousand() async throws {
        let (store, pool) = try await Self.store()
        try await withAsyncCleanup {
            _ = try await pool.execute("""
                INSERT INTO channels (bundle_id, environment, name, channel_id, state, created_at_ms, updated_at_ms)
                SELECT 'com.example.scores', 'production', 'n' || i, 'id' || i, 'active', 1, 1 FROM generate_series(1, 9999) AS i
                """)
            guard case .reserved(let last) = try await store.reserve(Self.create("last"), limit: 10_000, nowMs: 2) else {
                Issue.record("the 10,000th channel was refused")
                return
            }
            #expect(last.state == .creating)
            #expect(try await store.reserve(Self.create("one-too-many"), limit: 10_000, nowMs: 2) == .overLimit(count: 10_000))
            let gone = try #require(try await store.row(bundleID: "com.example.scores", environment: .production, name: "n1"))
            try await store.transition(gone, from: [.active], to: .deleted, nowMs: 3)
            if case .overLimit = try await store.reserve(Self.create("one-too-many"), limit: 10_000, nowMs: 3) {
                Issue.record("a deleted channel still counted against the limit")
            }
        } cleanup: {
            await pool.close()
        }
    }

    /// The broadcast path's look-up by Apple's id, the transitions guarded by the state, and a failed
    /// row taken again by a new create.
    @Test func lookupsAndTransitions() async throws {
        let (store, pool) = try await Self.store()
        try await withAsyncCleanup {
            var command = Self.create("match-1")
            command.messageStoragePolicy = .mostRecentMessageStored
            command.deleteAfterMs = 60_000
            guard case .reserved(let row) = try await store.reserve(command, limit: 10, nowMs: 100) else {
                Issue.record("not reserved")
                return
            }
            #expect(row.storagePolicy == .mostRecentMessageStored && row.deleteAfterMs == 60_000)
            // A second create of the name finds the row (it is not failed).
            #expect(try await store.reserve(command, limit: 10, nowMs: 101) == .existing(row))
            let active = try #require(try await store.transition(row, from: [.creating], to: .active, channelID: "Q2hh", deleteAtMs: .some(60_200), nowMs: 200))
            #expect(active.state == .active && active.channelID == "Q2hh" && active.deleteAtMs == 60_200)
            #expect(try await store.transition(row, from: [.creating], to: .failed, nowMs: 300) == nil)
            let found = try #require(try await store.row(bundleID: "com.example.scores", environment: .production, channelID: "Q2hh"))
            #expect(found == active)
            #expect(try await store.row(bundleID: "com.example.scores", environment: .sandbox, channelID: "Q2hh") == nil)
            #expect(try await store.rows(bundleID: "com.example.scores", name: "match-1") == [active])
            // Due for deletion at 60,200, not before.
            #expect(try await store.hygieneCandidates(nowMs: 60_199, limit: 10).isEmpty)
            #expect(try await store.hygieneCandidates(nowMs: 60_200, limit: 10) == [active])
            // A failed create is replaced by the next create of the name.
            guard case .reserved(let other) = try await store.reserve(Self.create("match-2"), limit: 10, nowMs: 100) else { return }
            try await store.transition(other, from: [.creating], to: .failed, nowMs: 150)
            guard case .reserved(let again) = try await store.reserve(Self.create("match-2"), limit: 10, nowMs: 400) else {
                Issue.record("a failed row was not taken again")
                return
            }
            #expect(again.state == .creating && again.updatedAtMs == 400)
        } cleanup: {
            await pool.close()
        }
    }

    /// `GET /v1/channels/<bundle id>[/<name>]` over the store: the row as JSON, 404 naming the unknown
    /// name, 400 naming the bad part, 503 without a database.
    @Test func theAdminEndpoint() async throws {
        let (store, pool) = try await Self.store()
        try await withAsyncCleanup {
            guard case .reserved(let row) = try await store.reserve(Self.create("match-9"), limit: 10, nowMs: 100) else { return }
            try await store.transition(row, from: [.creating], to: .active, channelID: "Y2g=", deleteAtMs: .some(9_000), nowMs: 200)
            let lookup = ChannelStatusEndpoint.Lookup(store: store)
            let one = await ChannelStatusEndpoint.answer(path: "com.example.scores/match-9", lookup: lookup)
            #expect(one.status == 200)
            #expect(one.body == #"{"channels":[{"bundle_id":"com.example.scores","name":"match-9","environment":"production","channel_id":"Y2g=","state":"active","message_storage_policy":"NO_MESSAGE_STORED","created_at_ms":100,"updated_at_ms":200,"delete_at_ms":9000}]}"#)
            let list = await ChannelStatusEndpoint.answer(path: "com.example.scores", lookup: lookup)
            #expect(list.status == 200 && list.body == one.body)
            let unknown = await ChannelStatusEndpoint.answer(path: "com.example.scores/nope", lookup: lookup)
            #expect(unknown.status == 404 && unknown.body.contains(#"no channel \"nope\" of com.example.scores"#))
            let badName = await ChannelStatusEndpoint.answer(path: "com.example.scores/a b", lookup: lookup)
            #expect(badName.status == 400 && badName.body.contains("name:"))
            let badApp = await ChannelStatusEndpoint.answer(path: "com_example/x", lookup: lookup)
            #expect(badApp.status == 400 && badApp.body.contains("bundle id:"))
            #expect(await ChannelStatusEndpoint.answer(path: "a/b/c", lookup: lookup).status == 400)
            #expect(await ChannelStatusEndpoint.answer(path: "com.example.scores", lookup: nil).status == 503)
        } cleanup: {
            await pool.close()
        }
    }
}
