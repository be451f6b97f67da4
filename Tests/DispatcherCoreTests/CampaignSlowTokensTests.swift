import APNs
import APNsSimulator
import DispatcherStatus
import Foundation
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// `CampaignPageWindow`'s two bounds without I/O: pages still starting their sends, and pages
/// unfinished behind the checkpoint.
@Suite struct CampaignPageWindowTests {
    @Test func aPageCountsAsSendingUntilItsLastSendStartedAndAsUnfinishedUntilItsOutcomesAreIn() {
        var window = CampaignPageWindow(cursor: nil, counts: CampaignCounts())
        let first = window.issue(lastToken: "a")
        let second = window.issue(lastToken: "b")
        #expect((window.sending, window.unfinished) == (2, 2))
        window.started(first)
        #expect((window.sending, window.unfinished) == (1, 2), "started, its answers outstanding")
        var counts = CampaignCounts()
        counts.count(.delivered)
        #expect(window.finish(second, counts: counts) == nil, "the checkpoint waits for the first page")
        #expect((window.sending, window.unfinished) == (0, 1), "a finished page has started")
        window.started(second)
        #expect(window.sending == 0, "a start seen after the finish changes nothing")
        let checkpoint = window.finish(first, counts: counts)
        #expect(checkpoint?.cursor == "b" && checkpoint?.counts.processed == 2)
        window.started(first)
        #expect((window.sending, window.unfinished, window.pending) == (0, 0, 0), "a page the checkpoint passed is forgotten")
    }
}

extension DispatcherEngineSuites {
    /// Campaign pages and tokens Apple answers late, on a running engine (`EngineWorld`: real
    /// PostgreSQL, librdkafka's mock cluster, the APNs simulator over TLS), pages of 7 tokens
    /// (docs/campaigns.md "Pages in flight").
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(5)))
    struct CampaignSlowTokensTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        static let pageSize = 7

        /// Makes `tokens` the app's whole audience, straight in PostgreSQL (the suite's tests share
        /// one database).
        static func prepare(_ tokens: [String], in world: EngineWorld) async throws {
            _ = try await world.pool.execute("DELETE FROM device_tokens")
            let now = SystemWallClock().nowMilliseconds()
            _ = try await world.store.applyBatch(tokens.map {
                DispatcherHarness.registration(token: $0, bundleID: EngineWorld.bundleID, userID: "audience", eventTimeMs: now)
            })
        }

        /// A request to one token outside the audience, confirmed before the faults are set (a new
        /// token connection sends one request before it fans out: a held token must not be that one).
        static func warmUp(_ world: EngineWorld) async throws {
            let requestID = "campaign-warm-up-\(UUID().uuidString.prefix(8))"
            try await world.send(requestID, to: [EngineWorld.token("f9")])
            try await eventually("the warm-up request completed") { world.feedback.completions(requestID).count == 1 }
        }

        /// A running engine whose campaign runner reads pages of 7 and whose app audience is `tokens`,
        /// past its warm-up, with the simulator holding the answers to `held`.
        static func start(
            _ tokens: [String], holding held: [String] = [], configure: (inout DispatcherConfiguration) -> Void = { _ in }
        ) async throws -> (EngineWorld, RunningEngine) {
            let world = try await EngineWorld()
            try await prepare(tokens, in: world)
            let engine = try world.startEngine {
                $0.campaigns.runnerEnabled = true
                $0.campaigns.pageSize = pageSize
                $0.campaigns.pagesInFlight = 3
                configure(&$0)
            }
            try await warmUp(world)
            if !held.isEmpty {
                var faults = APNsSimulatorFaults()
                faults.hold = .init(tokens: Set(held))
                world.simulator.setFaults(faults)
            }
            return (world, engine)
        }

        /// The tokens of `requestID` reported DELIVERED so far.
        static func delivered(_ requestID: String, in world: EngineWorld) -> Set<String> {
            Set(world.feedback.reports(requestID).filter { $0.outcome == .delivered }.map(\.deviceToken))
        }

        /// A few bad devices do not slow a campaign: 70 tokens in pages of 7, three pages sending at
        /// once, one token of every page held by the simulator (it answers none of them until
        /// released). The 60 others are all delivered while the 10 held answers are outstanding;
        /// released, the campaign completes with 70, each token sent once. Before, a page counted as in
        /// flight until its last answer: the three pages holding a token stopped the campaign after 18
        /// tokens, until the held answers came (a token Apple never answers: until the retry horizon).
        @Test func tokensAnsweredLateDoNotHoldBackTheRestOfACampaign() async throws {
            let tokens = (0..<70).map { EngineWorld.token("f7", $0) }.sorted()
            // Pages are read in token order: every run of 7 tokens in that order holds one held token.
            let held = stride(from: 3, to: tokens.count, by: Self.pageSize).map { tokens[$0] }
            let (world, engine) = try await Self.start(tokens, holding: held)

            try await world.sendToAudience("slow-campaign")
            let healthy = Set(tokens).subtracting(held)
            try await eventually("every token not held delivered while the held answers wait", timeout: .seconds(15)) {
                Self.delivered("slow-campaign", in: world).isSuperset(of: healthy)
            }
            #expect(Set(world.simulator.heldTokens()) == Set(held), "the held answers are still outstanding")
            #expect(world.feedback.completions("slow-campaign").isEmpty)
            world.simulator.setFaults(APNsSimulatorFaults())
            world.simulator.releaseHeld()
            try await eventually("the campaign completed") { world.feedback.completions("slow-campaign").count == 1 }
            let completed = try #require(world.feedback.completions("slow-campaign").first)
            #expect((completed.total, completed.delivered) == (70, 70))
            #expect(UserFanOutPagesTests.sends(of: tokens, in: world) == Dictionary(uniqueKeysWithValues: tokens.map { ($0, 1) }))
            // The row is marked after the `RequestCompleted` was published (CampaignRunner).
            try await eventually("the campaign's row completed") {
                try await world.pool.query("SELECT status FROM campaigns WHERE request_id = 'slow-campaign'").first?.string("status") == "completed"
            }
            try await engine.stop()
            await world.close()
        }

        /// A campaign's retries are parked as a request's are: with Apple answering 503 to every
        /// notification of a 20-token campaign (pages of 7) and a 300 ms cap on a page's waits, every
        /// notification is parked in `pending_retries`, every page finishes and the checkpoint passes
        /// the last token while none has an outcome yet, and no `RequestCompleted` is published. Apple
        /// answers again: the parked path delivers them, and the campaign completes once the last one
        /// is recorded, its counts read from `send_log` (20 delivered, none counted twice), its
        /// `pending_requests` row gone. Before, a campaign's retries waited on timers inside their
        /// page until the retry horizon (15 minutes by default), holding the checkpoint.
        @Test func aCampaignsRetriesAreParkedAndItCompletesAfterThem() async throws {
            let tokens = (0..<20).map { EngineWorld.token("f6", $0) }.sorted()
            let (world, engine) = try await Self.start(tokens) { $0.retryParking.maxUncommittedAge = .milliseconds(300) }
            var faults = APNsSimulatorFaults()
            faults.statusShares = [503: 1]
            world.simulator.setFaults(faults)

            try await world.sendToAudience("parked-campaign")
            try await eventually("every notification parked and the checkpoint past the last token") {
                let parked = try await world.count("SELECT count(*) FROM pending_retries WHERE request_id = $1", "parked-campaign")
                let cursor = try await world.pool.query(
                    "SELECT cursor FROM campaigns WHERE request_id = 'parked-campaign'").first?.string("cursor")
                return parked == tokens.count && cursor == tokens.last
            }
            #expect(world.feedback.completions("parked-campaign").isEmpty, "no RequestCompleted while notifications are parked")
            #expect(world.feedback.reports("parked-campaign").isEmpty)
            world.simulator.setFaults(APNsSimulatorFaults())
            try await eventually("the parked notifications re-driven and the campaign completed") {
                world.feedback.completions("parked-campaign").count == 1
            }
            let completed = try #require(world.feedback.completions("parked-campaign").first)
            #expect((completed.total, completed.delivered, completed.failed) == (20, 20, 0), "counted from send_log")
            #expect(try await world.sendLog("parked-campaign") == Dictionary(uniqueKeysWithValues: tokens.map { ($0, "DELIVERED") }))
            #expect(Set(world.feedback.reports("parked-campaign").map(\.deviceToken)) == Set(tokens))
            // The row closes (and the parked record is forgotten) right after the RequestCompleted.
            try await eventually("the campaign's row closed with the counts and its pending_requests row forgotten") {
                let row = try await world.pool.query(
                    "SELECT status, processed, delivered FROM campaigns WHERE request_id = 'parked-campaign'").first
                let closed = try row?.string("status") == "completed" && row?.int64("processed") == 20 && row?.int64("delivered") == 20
                let pending = try await world.count("SELECT count(*) FROM pending_requests WHERE request_id = $1", "parked-campaign")
                return closed && pending == 0
            }
            try await engine.stop()
            await world.close()
        }

        /// What is recorded under a campaign's request id is never sent again, whichever holder runs
        /// it: 12 of 30 tokens recorded before the campaign starts (more than a page of 7, so the
        /// earlier outcomes are read in two chunks, `EarlierOutcomes`), the other 18 reach Apple once,
        /// the 12 reports are published again from `send_log`, and the campaign counts 30 delivered.
        /// Before, the first holder (lease generation 1) skipped the read and sent all 30.
        @Test func aCampaignSendsOnlyTheTokensNoEarlierHolderRecorded() async throws {
            let tokens = (0..<30).map { EngineWorld.token("f5", $0) }.sorted()
            let (world, engine) = try await Self.start(tokens)
            let requestID = "recorded-campaign-\(UUID().uuidString.prefix(8))"
            let recorded = Array(tokens.prefix(10)) + [tokens[17], tokens[29]]
            for token in recorded { #expect(try await world.recordDelivered(requestID, token: token)) }
            try await world.sendToAudience(requestID)
            try await eventually("the campaign completed") { world.feedback.completions(requestID).count == 1 }
            let completed = try #require(world.feedback.completions(requestID).first)
            #expect((completed.total, completed.delivered) == (30, 30))
            let rest = tokens.filter { !recorded.contains($0) }
            #expect(UserFanOutPagesTests.sends(of: tokens, in: world) == Dictionary(uniqueKeysWithValues: rest.map { ($0, 1) }))
            let reports = world.feedback.reports(requestID)
            #expect(reports.count == 30 && Set(reports.map(\.deviceToken)) == Set(tokens))
            try await engine.stop()
            await world.close()
        }

        /// What a campaign keeps behind its checkpoint is bounded: with at most 4 pages unfinished, a
        /// held token in each of the first 4 pages stops the campaign after them (the other 24 tokens
        /// of those pages delivered, no token of a later page sent) until an answer comes.
        @Test func unfinishedPagesAreBounded() async throws {
            let tokens = (0..<70).map { EngineWorld.token("f8", $0) }.sorted()
            let held = stride(from: 3, to: 4 * Self.pageSize, by: Self.pageSize).map { tokens[$0] }
            let (world, engine) = try await Self.start(tokens, holding: held) { $0.campaigns.maxUnfinishedPages = 4 }

            try await world.sendToAudience("bounded-campaign")
            let firstPages = Set(tokens.prefix(4 * Self.pageSize)).subtracting(held)
            try await eventually("the first four pages' other tokens delivered", timeout: .seconds(15)) {
                Self.delivered("bounded-campaign", in: world).isSuperset(of: firstPages)
            }
            try await eventually("every held token sent") { Set(world.simulator.heldTokens()) == Set(held) }
            // The window is full: the runner reads no page before a held answer comes. The simulator's
            // record of what was sent is the witness; it is read once the held answers are released.
            let later = Array(tokens.dropFirst(4 * Self.pageSize))
            #expect(UserFanOutPagesTests.sends(of: later, in: world).isEmpty, "no token of a later page sent")
            world.simulator.setFaults(APNsSimulatorFaults())
            world.simulator.releaseHeld()
            try await eventually("the campaign completed") { world.feedback.completions("bounded-campaign").count == 1 }
            #expect(UserFanOutPagesTests.sends(of: tokens, in: world) == Dictionary(uniqueKeysWithValues: tokens.map { ($0, 1) }))
            try await engine.stop()
            await world.close()
        }
    }
}
