import APNs
import APNsSimulator
import Foundation
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// `UserTokenPages`, the reading of a `user_ids` request's tokens in pages, without I/O.
@Suite struct UserTokenPagesTests {
    static func token(_ user: String, _ n: Int, bundleID: String = "com.example.app", kind: String = "standard") -> StoredToken {
        StoredToken(deviceToken: String(format: "%@%04d", user, n), bundleID: bundleID, environment: .production, tokenKind: kind, userID: user)
    }

    @Test func theFirstReadSharesOnePageAmongTheUsers() {
        #expect(UserTokenPages.firstReadLimit(users: 1, pageSize: 1_000) == 1_000)
        #expect(UserTokenPages.firstReadLimit(users: 3, pageSize: 1_000) == 333)
        // More users than a page holds: one token each, read on later.
        #expect(UserTokenPages.firstReadLimit(users: 5_000, pageSize: 1_000) == 1)
        #expect(UserTokenPages.firstReadLimit(users: 0, pageSize: 0) == 1)
    }

    @Test func usersLeftFullAreReadOnPageByPageInRequestOrder() {
        // "aa" filled its share of the first read, "bb" did not, "cc" filled it, "dd" has none.
        let firstRead = ["aa": (0..<2).map { Self.token("aa", $0) }, "bb": [Self.token("bb", 0)], "cc": (0..<2).map { Self.token("cc", $0) }]
        var pages = UserTokenPages(users: ["aa", "bb", "cc", "dd"], firstRead: firstRead, limit: 2, pageSize: 3)
        #expect(pages.next == .init(user: "aa", after: "aa0001"))
        pages.read((2..<5).map { Self.token("aa", $0) })
        #expect(pages.next == .init(user: "aa", after: "aa0004"), "a full page: the user may have more")
        pages.read([Self.token("aa", 5)])
        #expect(pages.next == .init(user: "cc", after: "cc0001"), "a short page finishes the user")
        pages.read([])
        #expect(pages.next == nil)
        pages.read([Self.token("zz", 0)])
        #expect(pages.next == nil, "nothing left: a read changes nothing")
    }

    @Test func aPageThatDoesNotMoveTheCursorFinishesTheUser() {
        // A store answering the same page again must not loop forever.
        var pages = UserTokenPages(users: ["aa"], firstRead: ["aa": [Self.token("aa", 0)]], limit: 1, pageSize: 1)
        pages.read([Self.token("aa", 0)])
        #expect(pages.next == nil)
    }

    @Test func aPageKeepsTheTokensOfTheAppKindAndEnvironment() {
        var sandbox = Self.token("aa", 3)
        sandbox.environment = .sandbox
        let tokens = [Self.token("aa", 0), Self.token("aa", 1, bundleID: "com.example.other"), Self.token("aa", 2, kind: "voip"), sandbox]
        let any = UserTokenPages.targets(tokens, bundleID: "com.example.app", kind: "standard", environment: nil)
        #expect(any.map(\.token) == ["aa0000", "aa0003"])
        let production = UserTokenPages.targets(tokens, bundleID: "com.example.app", kind: "standard", environment: .production)
        #expect(production.map(\.token) == ["aa0000"])
    }
}

extension DispatcherEngineSuites {
    /// A user's tokens in pages on a running engine (`EngineWorld`: real PostgreSQL, librdkafka's mock
    /// cluster, the APNs simulator over TLS), with pages of 7 tokens (docs/dispatcher-engine.md "A
    /// user's tokens in pages").
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(5)))
    struct UserFanOutPagesTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        static let pageSize = 7

        /// Registers `tokens` of `user` straight into PostgreSQL.
        static func register(_ tokens: [String], user: String, bundleID: String = EngineWorld.bundleID, in world: EngineWorld) async throws {
            let now = SystemWallClock().nowMilliseconds()
            _ = try await world.store.applyBatch(tokens.map {
                DispatcherHarness.registration(token: $0, bundleID: bundleID, userID: user, eventTimeMs: now)
            })
        }

        static func request(_ requestID: String, to users: [String]) -> SendRequest {
            var request = SendRequest(requestID: requestID, target: .userIDs(UserIds(userIDs: users)), notification: EngineWorld.alert(.unspecified))
            request.createdAtMs = SystemWallClock().nowMilliseconds()
            return request
        }

        /// How many times the simulator received each of `tokens`.
        static func sends(of tokens: [String], in world: EngineWorld) -> [String: Int] {
            let paths = Dictionary(uniqueKeysWithValues: tokens.map { ("/3/device/\($0)", $0) })
            var counts: [String: Int] = [:]
            for request in world.simulator.receivedRequests() { if let token = paths[request.path] { counts[token, default: 0] += 1 } }
            return counts
        }

        /// Two users, one with 50 tokens of the app (and 5 of another app between them, read and left
        /// out), the other with 3: the first read takes 3 of each (7 / 2 users), then pages of 7 follow;
        /// every token of the app reaches Apple exactly once and the request counts 53.
        @Test func aUserWithMoreTokensThanAPageGetsEveryTokenExactlyOnce() async throws {
            let world = try await EngineWorld()
            let big = (0..<50).map { EngineWorld.token("b1", $0 * 2) }
            let otherApp = (0..<5).map { EngineWorld.token("b1", $0 * 20 + 1) }
            let small = (0..<3).map { EngineWorld.token("c1", $0) }
            try await Self.register(big, user: "big", in: world)
            try await Self.register(otherApp, user: "big", bundleID: "com.example.other", in: world)
            try await Self.register(small, user: "small", in: world)
            let engine = try world.startEngine { $0.userPageSize = Self.pageSize }
            _ = try await world.produceRequest(Self.request("paged", to: ["big", "small", "nobody"]))
            try await eventually("the request completed") { world.feedback.completions("paged").count == 1 }
            let completed = try #require(world.feedback.completions("paged").first)
            #expect((completed.total, completed.delivered) == (53, 53))
            let sends = Self.sends(of: big + small + otherApp, in: world)
            #expect(sends == Dictionary(uniqueKeysWithValues: (big + small).map { ($0, 1) }))
            #expect(Set(world.feedback.reports("paged").map(\.deviceToken)) == Set(big + small))
            #expect(try await world.sendLog("paged").count == 53)
            try await engine.stop()
            await world.close()
        }

        /// Tokens Apple is slow to answer hold only their own sends, never the rest of their request
        /// (the kind of fault the fault matrix's `hung-tokens` row injects): a user with 70 tokens in
        /// pages of 7, one token of every page held by the simulator. The 60 others are all delivered
        /// while the 10 held answers are still outstanding (each of the 10 sent once: no stream timed
        /// out, the request timeout is 20 s); released, the held ones are delivered and the request
        /// completes with 70. Before, three pages were sent at a time and a page ended only with its
        /// slowest answer, so pages 4 to 10 waited for the held ones.
        @Test func tokensAnsweredLateDoNotHoldBackTheRestOfTheirRequest() async throws {
            let world = try await EngineWorld()
            let tokens = (0..<70).map { EngineWorld.token("a7", $0) }.sorted()
            try await Self.register(tokens, user: "slow", in: world)
            // Pages are read in token order: every run of 7 tokens in that order holds one held token.
            let held = stride(from: 3, to: tokens.count, by: 7).map { tokens[$0] }
            let engine = try world.startEngine { $0.userPageSize = Self.pageSize }
            // A warm-up request confirms the connection first (a new token connection sends one
            // request before it fans out: a held token must not be that one).
            try await Self.register([EngineWorld.token("a8")], user: "warm", in: world)
            _ = try await world.produceRequest(Self.request("slow-warm-up", to: ["warm"]))
            try await eventually("the warm-up request completed") { world.feedback.completions("slow-warm-up").count == 1 }
            var faults = APNsSimulatorFaults()
            faults.hold = .init(tokens: Set(held))
            world.simulator.setFaults(faults)

            _ = try await world.produceRequest(Self.request("slow", to: ["slow"]))
            let healthy = Set(tokens).subtracting(held)
            try await eventually("every token not held delivered while the held answers wait", timeout: .seconds(15)) {
                Set(world.feedback.reports("slow").filter { $0.outcome == .delivered }.map(\.deviceToken)) == healthy
            }
            #expect(Set(world.simulator.heldTokens()) == Set(held), "the held answers are still outstanding")
            #expect(Self.sends(of: held, in: world) == Dictionary(uniqueKeysWithValues: held.map { ($0, 1) }), "no held stream timed out")
            #expect(world.feedback.completions("slow").isEmpty)
            world.simulator.setFaults(APNsSimulatorFaults())
            world.simulator.releaseHeld()
            try await eventually("the request completed") { world.feedback.completions("slow").count == 1 }
            let completed = try #require(world.feedback.completions("slow").first)
            #expect((completed.total, completed.delivered) == (70, 70))
            #expect(Self.sends(of: tokens, in: world) == Dictionary(uniqueKeysWithValues: tokens.map { ($0, 1) }))
            try await engine.stop()
            await world.close()
        }

        /// A request redelivered after a partial run (12 of its 30 tokens recorded in `send_log`,
        /// more than the 7 earlier outcomes read at once, so every page reads its own): only the other
        /// 18 reach Apple, the 12 reports are published again from `send_log`, and the request counts 30.
        @Test func aRedeliveredRequestSendsOnlyTheTokensNotRecorded() async throws {
            let world = try await EngineWorld()
            let tokens = (0..<30).map { EngineWorld.token("d1", $0) }
            try await Self.register(tokens, user: "resumed", in: world)
            // What the partial run recorded: the request's fingerprint (a handling records it before
            // anything else), then the first 10 pages' worth in token order and two further on.
            let request = Self.request("resumed", to: ["resumed"])
            _ = try await world.store.recordFingerprints([("resumed", RequestFingerprint.of(request))])
            let recorded = Array(tokens.prefix(10)) + [tokens[17], tokens[29]]
            for token in recorded { #expect(try await world.recordDelivered("resumed", token: token, userID: "resumed")) }
            let engine = try world.startEngine { $0.userPageSize = Self.pageSize }
            _ = try await world.produceRequest(request)
            try await eventually("the request completed") { world.feedback.completions("resumed").count == 1 }
            let completed = try #require(world.feedback.completions("resumed").first)
            #expect((completed.total, completed.delivered) == (30, 30))
            let rest = tokens.filter { !recorded.contains($0) }
            #expect(Self.sends(of: tokens, in: world) == Dictionary(uniqueKeysWithValues: rest.map { ($0, 1) }))
            let reports = world.feedback.reports("resumed")
            #expect(reports.count == 30 && Set(reports.map(\.deviceToken)) == Set(tokens))
            try await engine.stop()
            await world.close()
        }
    }
}

/// The reads behind `UserTokenPages` on a real PostgreSQL: a user's tokens a page at a time in token
/// order, and a request's earlier outcomes read at most `limit` at once, then by page.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(1)))
struct UserTokenReadsTests {
    @Test func tokensAreReadAPageAtATimeAndProgressIsLimited() async throws {
        let (parking, store, pool) = try await PendingRetryStoreTests.store()
        try await withAsyncCleanup {
            let now = SystemWallClock().nowMilliseconds()
            let tokens = (0..<10).map { String(format: "ee%06d", $0) + String(repeating: "0", count: 56) }
            _ = try await store.applyBatch(tokens.reversed().map {
                DispatcherHarness.registration(token: $0, bundleID: "com.example.app", userID: "pages", eventTimeMs: now)
            })
            _ = try await store.applyBatch([DispatcherHarness.registration(
                token: String(repeating: "ef", count: 32), bundleID: "com.example.app", userID: "one", eventTimeMs: now)])
            // The first read: at most `limit` of each user, the first in token order.
            let first = try await store.activeTokens(ofUsers: ["pages", "one", "pages", "nobody"], limit: 4)
            #expect(first["pages"]?.map(\.deviceToken) == Array(tokens.prefix(4)))
            #expect(first["one"]?.count == 1 && first["nobody"] == nil)
            // Then on from a cursor.
            #expect(try await store.activeTokens(ofUser: "pages", after: tokens[3], limit: 4).map(\.deviceToken) == Array(tokens[4..<8]))
            #expect(try await store.activeTokens(ofUser: "pages", after: tokens[7], limit: 4).map(\.deviceToken) == Array(tokens[8...]))

            for token in tokens.prefix(5) {
                var report = DeliveryReport()
                report.requestID = "r-pages"
                report.deviceToken = token
                report.outcome = .delivered
                #expect(try await store.recordOutcome(report, event: report.serializedBytes()))
            }
            let limited = try await parking.progress(requestIDs: ["r-pages", "r-none"], limit: 3)
            #expect(limited["r-pages"]?.recorded.count == 3 && limited["r-pages"]?.complete == false)
            let whole = try await parking.progress(requestIDs: ["r-pages"], limit: 5)
            #expect(whole["r-pages"]?.recorded.count == 5 && whole["r-pages"]?.complete == false, "as many as the limit: maybe more")
            #expect(try await parking.progress(requestIDs: ["r-pages"], limit: 6)["r-pages"]?.complete == true)
            let page = try await parking.progress(requestID: "r-pages", tokens: Array(tokens[3..<7]))
            #expect(Set(page.recorded.keys) == Set(tokens[3..<5]) && page.parked.isEmpty)
        } cleanup: {
            await pool.close()
        }
    }
}
