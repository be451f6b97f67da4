import DispatcherStatus
import PushMessages
import ServiceCore
import Testing

@testable import DispatcherCore

/// The delivery pipeline's admission policies, as values without I/O (docs/dispatcher-engine.md
/// "Admission").
@Suite struct AdmissionPolicyTests {
    static func candidate(_ requestID: String = "r1", sends: Bool = true) -> AdmissionCandidate {
        AdmissionCandidate(requestID: requestID, bundleID: "com.example.app", sends: sends)
    }

    @Test func theCancelCheckConsultsTheProcessWideSetOnEveryAsk() async throws {
        let cancellations = CampaignCancellations()
        let policy = CancelCheckPolicy(cancellations: cancellations)
        #expect(policy.rechecksBeforeSend)
        #expect(try await policy.admit(Self.candidate(), permit: NotificationPermit()) == .admit)
        cancellations.insert("r1", atMs: 1)
        #expect(try await policy.admit(Self.candidate(), permit: NotificationPermit()) == .settle(.skipped, .cancelled))
        #expect(policy.recheck(Self.candidate()) == .settle(.skipped, .cancelled))
        #expect(policy.recheck(Self.candidate("r2")) == .admit, "another request's cancel")
        #expect(policy.recheck(Self.candidate(sends: false)) == .admit, "an outcome known without sending stays as it is")
        let flagged = CancelCheckPolicy(cancellations: CampaignCancellations(), alsoCancelled: { true })
        #expect(flagged.recheck(Self.candidate()) == .settle(.skipped, .cancelled))
    }

    @Test func theBudgetHoldsOnePermitPerNotificationUntilItIsReleased() async throws {
        let budget = AsyncSemaphore(permits: 1)
        let policy = InFlightBudgetPolicy(budget: budget)
        let first = NotificationPermit()
        #expect(try await policy.admit(Self.candidate(), permit: first) == .admit)
        let second = NotificationPermit()
        first.release()
        #expect(try await policy.admit(Self.candidate(), permit: second) == .admit, "admitted once the first permit came back")
        first.release()  // at most once
        second.release()
        // Without permits left, a settlement is admitted only when the budget counts settlements.
        let none = AsyncSemaphore(permits: 0)
        let campaignLane = InFlightBudgetPolicy(budget: none, budgetsSettlements: false)
        #expect(try await campaignLane.admit(Self.candidate(sends: false), permit: NotificationPermit()) == .admit)
    }

    @Test func aSettlementDoesNotWaitForTheAppsTokenBucket() async throws {
        let policy = AppRateLimitPolicy(limiter: AppRateLimiter(defaultRate: nil, limits: ["com.example.app": 0.001]))
        #expect(try await policy.admit(Self.candidate(sends: false), permit: NotificationPermit()) == .admit)
    }

    /// The campaign chain's order: a cancel settles first, so the lane's permit is not taken.
    @Test func theChainAsksInOrderAndAFirstSettlementWins() async throws {
        let cancellations = CampaignCancellations()
        cancellations.insert("r1", atMs: 1)
        let lane = AsyncSemaphore(permits: 0)  // any permit taken would wait for ever
        let chain = AdmissionChain([
            CancelCheckPolicy(cancellations: cancellations),
            InFlightBudgetPolicy(budget: lane, budgetsSettlements: false),
            Refuse(outcome: .failed, reason: .expired),
        ])
        #expect(try await chain.admit(Self.candidate(), permit: NotificationPermit()) == .settle(.skipped, .cancelled))
        #expect(chain.recheck(Self.candidate()) == .settle(.skipped, .cancelled))
    }

    /// A later rule is a new value in the chain, not an edit of the pipeline.
    @Test func aNewPolicyJoinsTheChain() async throws {
        let chain = AdmissionChain([InFlightBudgetPolicy(budget: AsyncSemaphore(permits: 1)), Refuse(outcome: .skipped, reason: .notForTopic)])
        let permit = NotificationPermit()
        #expect(try await chain.admit(Self.candidate(), permit: permit) == .settle(.skipped, .notForTopic))
        #expect(chain.recheck(Self.candidate()) == .admit, "a policy that does not recheck is asked once")
        permit.release()
    }

    /// A policy that settles every notification that would send.
    struct Refuse: AdmissionPolicy {
        var outcome: DeliveryOutcome
        var reason: OutcomeReason
        func admit(_ candidate: AdmissionCandidate, permit: NotificationPermit) async throws -> AdmissionVerdict {
            candidate.sends ? .settle(outcome, reason) : .admit
        }
    }
}

/// `RequestCompleted` as `RequestCompletion` builds it for every source.
@Suite struct RequestCompletionTests {
    @Test func countsAndStatusGoIntoTheEvent() {
        var counts = CampaignCounts()
        for outcome: DeliveryOutcome in [.delivered, .rejected, .skipped, .delivered] { counts.count(outcome) }
        let completion = RequestCompletion(
            requestID: "r1", requestedAtMs: 1_000, counts: counts, status: .cancelled, lane: .campaign, traceParent: "")
        let event = completion.event(completedAtMs: 2_000)
        #expect(event.requestID == "r1" && event.requestedAtMs == 1_000 && event.completedAtMs == 2_000)
        #expect(event.status == .cancelled)
        #expect((event.total, event.delivered, event.rejected, event.failed, event.skipped) == (4, 2, 1, 0, 1))
        let parked = RequestCompletion.counts(["DELIVERED": 2, "FAILED": 1, "SKIPPED": 3])
        #expect((parked.processed, parked.delivered, parked.failed, parked.skipped) == (6, 2, 1, 3))
        let rejected = RequestCompletion.rejected(requestID: "r2", error: "bad", completedAtMs: 3)
        #expect(rejected.requestID == "r2" && rejected.error == "bad" && rejected.status == .unspecified && rejected.total == 0)
    }
}
