import APNs
import DispatcherStatus
import Foundation
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// The campaigns table on a real PostgreSQL (docs/campaigns.md): creation is idempotent, the lease
/// is fenced by its generation with the database's clock, and the audience is paged by keyset in
/// token order exactly as the filter says.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(2)))
struct CampaignStoreTests {
    static func stores() async throws -> (CampaignStore, TokenStore, PostgresPool) {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 4))
        try await pool.start()
        let tokens = TokenStore(pool: pool)
        try await tokens.migrate()
        return (CampaignStore(pool: pool), tokens, pool)
    }

    static func request(_ id: String, sendAtMs: Int64 = 0, filter: AudienceFilter? = nil) -> SendRequest {
        var request = CampaignDecisionTests.audienceRequest(filter)
        request.requestID = id
        request.sendAtMs = sendAtMs
        return request
    }

    /// Waits for `condition` with a deadline (no sleep-then-assert).
    static func eventually<T>(_ what: String, timeout: Duration = .seconds(20), _ condition: () async throws -> T?) async throws -> T {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let value = try await condition() { return value }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestFailure("timed out waiting for \(what)")
    }

    @Test func aRedeliveredRequestFindsItsRowAndTheStatusAnswersFromPostgres() async throws {
        let (store, _, pool) = try await Self.stores()
        try await withAsyncCleanup {
            let now = SystemWallClock().nowMilliseconds()
            #expect(try await store.create(Self.request("status-now"), requestedAtMs: now, nowMs: now))
            #expect(try await !store.create(Self.request("status-now"), requestedAtMs: now, nowMs: now))
            #expect(try await store.create(Self.request("status-later", sendAtMs: now + 3_600_000), requestedAtMs: now, nowMs: now))
            #expect(try await store.status(requestID: "status-now")?.status == "accepted")
            let later = try #require(try await store.status(requestID: "status-later"))
            #expect(later.status == "scheduled" && later.sendAtMs == now + 3_600_000 && later.isCampaign)
            #expect(later.json.contains(#""status":"scheduled""#))
            #expect(try await store.status(requestID: "never-seen") == nil)
            // Not due: never taken; the runner learns how long to sleep.
            let taken = try #require(try await store.takeLease(owner: "a", duration: .seconds(30)))
            #expect(taken.requestID == "status-now" && taken.state == .running && taken.lease?.generation == 1)
            #expect(try await store.takeLease(owner: "b", duration: .seconds(30)) == nil)
            let wait = try #require(try await store.millisecondsUntilNextDue())
            #expect(wait > 3_500_000 && wait <= 3_600_000)
            #expect(try await store.status(requestID: "status-now")?.status == "running")
            _ = try await pool.execute("DELETE FROM campaigns")
        } cleanup: {
            await pool.close()
        }
    }

    @Test func aPausedOldHolderCannotWriteAfterLosingItsLease() async throws {
        let (store, _, pool) = try await Self.stores()
        try await withAsyncCleanup {
            let now = SystemWallClock().nowMilliseconds()
            try await store.create(Self.request("fenced"), requestedAtMs: now, nowMs: now)
            // A takes a short lease and "pauses" (writes nothing) past its end.
            let old = try #require(try await store.takeLease(owner: "holder-a", duration: .milliseconds(300)).flatMap(\.lease))
            var counts = CampaignCounts()
            counts.count(.delivered)
            #expect(try await store.checkpoint(old, cursor: "0a", counts: counts))
            // B takes it once the database's clock says A's lease ended.
            let new = try await Self.eventually("the lease to expire") {
                try await store.takeLease(owner: "holder-b", duration: .seconds(30))
            }
            let lease = try #require(new.lease)
            #expect(lease.generation == old.generation + 1 && new.cursor == "0a" && new.counts == counts)
            counts.count(.delivered)
            #expect(try await store.checkpoint(lease, cursor: "0b", counts: counts))
            // A wakes up: every write under its generation updates nothing.
            var stale = counts
            stale.count(.failed)
            #expect(try await !store.checkpoint(old, cursor: "ff", counts: stale))
            #expect(try await store.renew(old) == nil)
            #expect(try await !store.finish(old, state: .completed, counts: stale, completedAtMs: now))
            #expect(try await !store.release(old))
            let row = try #require(try await store.campaign(requestID: "fenced"))
            #expect(row.cursor == "0b" && row.counts == counts && row.state == .running)
            // Even the same owner name cannot write with an old generation.
            let sameName = CampaignLease(requestID: "fenced", owner: "holder-b", generation: old.generation, duration: .seconds(30), confirmedAt: .now)
            #expect(try await !store.checkpoint(sameName, cursor: "fe", counts: stale))
            // B finishes; the row is closed and no one can take it again.
            #expect(try await store.finish(lease, state: .completed, counts: counts, completedAtMs: now))
            #expect(try await store.status(requestID: "fenced")?.status == "completed")
            #expect(try await store.takeLease(owner: "holder-c", duration: .seconds(30)) == nil)
        } cleanup: {
            await pool.close()
        }
    }

    @Test func aReleasedLeaseIsFreeAtOnceAndACancelIsSeenOnRenewal() async throws {
        let (store, _, pool) = try await Self.stores()
        try await withAsyncCleanup {
            let now = SystemWallClock().nowMilliseconds()
            try await store.create(Self.request("cancel-me"), requestedAtMs: now, nowMs: now)
            let first = try #require(try await store.takeLease(owner: "a", duration: .seconds(30))?.lease)
            #expect(try await store.renew(first) == CampaignStore.Renewal(cancelRequested: false))
            #expect(try await store.requestCancel(requestID: "cancel-me", reason: "sent_by_mistake", atMs: now))
            #expect(try await store.renew(first) == CampaignStore.Renewal(cancelRequested: true))
            #expect(try await store.release(first))
            let second = try #require(try await store.takeLease(owner: "b", duration: .seconds(30)))
            #expect(second.cancelRequested && second.lease?.generation == 2)
            #expect(try await store.finish(second.lease!, state: .cancelled, counts: CampaignCounts(), completedAtMs: now))
            // A cancel for a finished campaign or an unknown request changes nothing.
            #expect(try await !store.requestCancel(requestID: "cancel-me", reason: "late", atMs: now))
            #expect(try await !store.requestCancel(requestID: "unknown", reason: "late", atMs: now))
            #expect(try await store.status(requestID: "cancel-me")?.status == "cancelled")
        } cleanup: {
            await pool.close()
        }
    }

    @Test func aCancelledScheduledRequestBecomesDueAtOnce() async throws {
        let (store, _, pool) = try await Self.stores()
        try await withAsyncCleanup {
            _ = try await pool.execute("DELETE FROM campaigns")
            let now = SystemWallClock().nowMilliseconds()
            try await store.create(Self.request("cancel-scheduled", sendAtMs: now + 3_600_000), requestedAtMs: now, nowMs: now)
            #expect(try await store.takeLease(owner: "a", duration: .seconds(30)) == nil)
            #expect(try await store.requestCancel(requestID: "cancel-scheduled", reason: "sent_by_mistake", atMs: now))
            let taken = try #require(try await store.takeLease(owner: "a", duration: .seconds(30)))
            #expect(taken.requestID == "cancel-scheduled" && taken.cancelRequested)
        } cleanup: {
            await pool.close()
        }
    }

    @Test func theVersionFunctionAgreesWithDottedVersion() async throws {
        let (_, _, pool) = try await Self.stores()
        try await withAsyncCleanup {
            let texts = ["0", "0.0", "1", "1.0", "1.2", "1.2.0", "1.10", "1.9", "1.05", "010.1", "10.1", "17.4.1", "2", "1.99.99",
                         "1.2b", "", "1..2", "v1", "1234567890", "999999999.1"]
            for a in texts {
                // What the audience filter compares with: the components, given as an `integer[]` parameter.
                let expected = DottedVersion(a).map { PostgresValue.int32Array($0.int32Components) }
                let rows = try await pool.query(
                    "SELECT push_version_tuple($1) AS v, push_version_tuple($1) = $2::integer[] AS same", [.string(a), expected])
                let stored = try rows.first?.string("v")
                #expect(stored == DottedVersion(a).map { "{" + $0.components.map(String.init).joined(separator: ",") + "}" },
                        "push_version_tuple('\(a)')")
                #expect(try rows.first?.bool("same") == (expected == nil ? nil : true), "push_version_tuple('\(a)') = its components")
            }
            for a in texts {
                for b in texts {
                    guard let left = DottedVersion(a), let right = DottedVersion(b) else { continue }
                    let rows = try await pool.query(
                        "SELECT push_version_tuple($1) >= push_version_tuple($2) AS ge, push_version_tuple($1) < push_version_tuple($2) AS lt",
                        [.string(a), .string(b)])
                    #expect(try rows.first?.bool("ge") == (left >= right), "\(a) >= \(b)")
                    #expect(try rows.first?.bool("lt") == (left < right), "\(a) < \(b)")
                }
            }
        } cleanup: {
            await pool.close()
        }
    }

    @Test func keysetPagesReachExactlyTheFilteredAudienceInBoundedPages() async throws {
        let (store, _, pool) = try await Self.stores()
        try await withAsyncCleanup {
            // 3,000 rows of two apps, both environments, two kinds, varied attributes; some inactive.
            _ = try await pool.execute("""
                INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, status, last_event_at_ms,
                                           registered_at_ms, attributes)
                SELECT md5(i::text) || md5((i * 7)::text),
                       CASE WHEN i % 10 = 0 THEN 'com.example.other' ELSE 'com.example.app' END,
                       CASE WHEN i % 3 = 0 THEN 'sandbox' ELSE 'production' END,
                       CASE WHEN i % 11 = 0 THEN 'voip' ELSE 'standard' END,
                       CASE WHEN i % 13 = 0 THEN 'inactive' ELSE 'active' END,
                       i, i * 1000,
                       jsonb_build_object('locale', (ARRAY['en_US','de_DE','fr_FR'])[i % 3 + 1],
                                          'model', (ARRAY['iPhone15,2','iPhone14,7','iPad13,1','iPhone16,1'])[i % 4 + 1],
                                          'app_version', (ARRAY['2.9','2.10','2.10.1','3.0','2.9.9','2.x', '10'])[i % 7 + 1],
                                          'os_version', (ARRAY['17.0','17.4.1','18','16.7.2','18.1'])[i % 5 + 1])
                  FROM generate_series(1, 3000) AS i
                """)
            let all = try await pool.query("SELECT \(TokenStore.columns), registered_at_ms, attributes::text AS attributes FROM device_tokens")
            var filter = AudienceFilter()
            filter.locales = ["de_DE", "fr_FR"]
            filter.models = ["iPhone15,2", "iPhone16,1", "iPad13,1"]
            filter.minAppVersion = "2.10"
            filter.belowAppVersion = "3"
            filter.minOsVersion = "17"
            filter.registeredSinceMs = 200_000
            for (query, label) in [
                (try AudienceQuery(Self.request("f", filter: filter)), "filtered"),
                (try AudienceQuery(CampaignDecisionTests.audienceRequest(environment: .sandbox)), "sandbox"),
                (try AudienceQuery(CampaignDecisionTests.audienceRequest(pushType: .voip)), "voip"),
            ] {
                var expected: [String] = []
                for row in all {
                    let token = try TokenStore.storedToken(row)
                    let json = try row.string("attributes") ?? "{}"
                    let attributes = (try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: String]) ?? [:]
                    if query.matches(bundleID: token.bundleID, environment: token.environment, tokenKind: token.tokenKind,
                                     isActive: token.isActive, attributes: attributes, registeredAtMs: try row.int64("registered_at_ms")) {
                        expected.append(token.deviceToken)
                    }
                }
                var reached: [String] = []
                var cursor: String?
                var pages = 0
                while true {
                    let page = try await store.audiencePage(query, after: cursor, limit: 97)
                    #expect(page.count <= 97)
                    guard let last = page.last else { break }
                    reached += page.map(\.deviceToken)
                    cursor = last.deviceToken
                    pages += 1
                }
                #expect(!expected.isEmpty, "\(label): the seed must reach someone")
                #expect(reached == expected.sorted(), "\(label): \(reached.count) reached, \(expected.count) expected")
                #expect(pages == (expected.count + 96) / 97)
            }
            // The partial index serves the page (seq scans off so a small table still shows the plan).
            let plan = try await TestDatabase.withConnection { connection in
                _ = try await connection.execute("SET enable_seqscan = off")
                let (sql, parameters) = try AudienceQuery(CampaignDecisionTests.audienceRequest()).page(after: nil, limit: 100)
                return try await connection.query("EXPLAIN " + sql, parameters).compactMap { try $0.string("QUERY PLAN") }.joined(separator: "\n")
            }
            #expect(plan.contains("device_tokens_campaign_audience"), "\(plan)")
        } cleanup: {
            await pool.close()
        }
    }

    @Test func recordedOutcomesAreReadForOnePageOnly() async throws {
        let (store, tokens, pool) = try await Self.stores()
        try await withAsyncCleanup {
            var report = DeliveryReport()
            report.requestID = "page-read"
            report.outcome = .delivered
            for token in ["aa", "bb", "cc"] {
                report.deviceToken = token
                try await tokens.recordOutcome(report, event: [1, 2, 3])
            }
            let found = try await tokens.makePendingRetryStore().progress(requestID: "page-read", tokens: ["bb", "cc", "dd"])
            #expect(Set(found.recorded.keys) == ["bb", "cc"] && found.parked.isEmpty)
            #expect(try await store.status(requestID: "page-read")?.counts.delivered == 3)
            #expect(try await store.status(requestID: "page-read")?.status == "running")
        } cleanup: {
            await pool.close()
        }
    }
}
