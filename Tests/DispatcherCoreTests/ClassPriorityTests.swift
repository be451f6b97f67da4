import APNsSimulator
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// Class priority (docs/dispatcher-engine.md "Class priority"): its decisions as a value without I/O,
/// then the policy in admission chains as the processor builds them.
@Suite struct ClassPriorityTests {
    @Test func transactionalCandidatesNeverWaitAndHoldLowerRanksBack() {
        var state = ClassPriorityState()
        var passed = state.enter(.campaign, waiter: 1)
        #expect(passed, "nothing of a higher rank: a campaign candidate passes")
        passed = state.enter(.transactional, waiter: 2)
        #expect(passed, "a transactional candidate passes beside campaign work")
        passed = state.enter(.transactional, waiter: 3)
        #expect(passed)
        let queued = [state.enter(.campaign, waiter: 4), state.enter(.bulk, waiter: 5), state.enter(.campaign, waiter: 6)]
        #expect(queued == [false, false, false])
        #expect(state.queued == [[], [5], [4, 6]])
        var released = state.leave(.campaign)
        #expect(released.isEmpty, "a campaign candidate leaving lets nothing of its rank through")
        released = state.leave(.transactional)
        #expect(released.isEmpty, "one transactional candidate is still admitting")
        passed = state.enter(.transactional, waiter: 7)
        #expect(passed, "transactional work still never waits")
        released = state.leave(.transactional)
        #expect(released.isEmpty)
        released = state.leave(.transactional)
        #expect(released == [5, 4, 6], "the last one out lets the queued through, in class and arrival order")
        #expect(state.admitting == [0, 1, 2] && state.queued == [[], [], []])
    }

    @Test func bulkAndCampaignWorkDoNotHoldEachOtherBack() {
        var state = ClassPriorityState()
        let passed = [state.enter(.bulk, waiter: 1), state.enter(.campaign, waiter: 2), state.enter(.bulk, waiter: 3)]
        #expect(passed == [true, true, true])
        #expect(state.mayPass(.campaign) && state.mayPass(.bulk))
    }

    @Test func aWithdrawnWaiterLeavesTheQueueAndAnUnknownOneChangesNothing() {
        var state = ClassPriorityState()
        let passed = [state.enter(.transactional, waiter: 1), state.enter(.campaign, waiter: 2), state.enter(.campaign, waiter: 3)]
        #expect(passed == [true, false, false])
        var withdrawn = state.withdraw(2, of: .campaign)
        #expect(withdrawn.wasQueued && withdrawn.released.isEmpty)
        withdrawn = state.withdraw(2, of: .campaign)
        #expect(!withdrawn.wasQueued && withdrawn.released.isEmpty)
        let released = state.leave(.transactional)
        #expect(released == [3])
        // Leaving more often than entering never goes below zero.
        _ = state.leave(.transactional)
        #expect(state.admitting[WorkClass.transactional.rawValue] == 0)
    }

    /// What the campaign runner reads (`TransactionalActivity`): when a transactional candidate last
    /// arrived, whatever lower classes do.
    @Test func theGateNotesTheLastTransactionalAdmissionOnly() async throws {
        let gate = ClassPriorityGate()
        #expect(gate.lastTransactionalAdmission == nil)
        try await gate.enter(.campaign)
        try await gate.enter(.bulk)
        #expect(gate.lastTransactionalAdmission == nil, "lower classes are not transactional work")
        let before = ContinuousClock.now
        try await gate.enter(.transactional)
        let first = try #require(gate.lastTransactionalAdmission)
        #expect(first >= before && first <= .now)
        try await gate.enter(.transactional)
        let second = try #require(gate.lastTransactionalAdmission)
        #expect(second >= first)
        for workClass in [WorkClass.campaign, .bulk, .transactional, .transactional] { gate.leave(workClass) }
        try await gate.enter(.campaign)
        try await gate.enter(.bulk)
        #expect(gate.lastTransactionalAdmission == second, "leaving and lower classes do not move it")
    }

    /// The processor's chains: a campaign page's candidate (lane free) and a request's candidate
    /// waiting for the transactional budget. The campaign candidate waits until the request's is
    /// admitted; before class priority it was admitted first (its lane had room).
    @Test func aRequestWaitingForItsBudgetIsAdmittedAheadOfQueuedCampaignWork() async throws {
        let gate = ClassPriorityGate()
        let budget = AsyncSemaphore(permits: 1)
        let lane = AsyncSemaphore(permits: 100)
        let transactional = AdmissionChain([ClassPriorityPolicy(gate: gate, workClass: .transactional), InFlightBudgetPolicy(budget: budget)])
        let campaign = AdmissionChain([
            ClassPriorityPolicy(gate: gate, workClass: .campaign), InFlightBudgetPolicy(budget: lane, budgetsSettlements: false),
        ])
        let order = Shared<[String]>([])
        let running = NotificationPermit()
        #expect(try await transactional.admit(AdmissionPolicyTests.candidate("r-running"), permit: running) == .admit)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                _ = try await transactional.admit(AdmissionPolicyTests.candidate("r-waiting"), permit: NotificationPermit())
                order.update { $0.append("request") }
            }
            try await eventually("the request's candidate waits for the budget") { budget.queuedWaiters == 1 }
            group.addTask {
                _ = try await campaign.admit(AdmissionPolicyTests.candidate("c-1"), permit: NotificationPermit())
                order.update { $0.append("campaign") }
            }
            try await eventually("the campaign candidate queued behind it") { gate.queued[.campaign] == 1 }
            #expect(order.value.isEmpty)
            running.release()
            try await group.waitForAll()
        }
        #expect(order.value == ["request", "campaign"])
        #expect(gate.queued.values.allSatisfy { $0 == 0 })
    }

    @Test func aQueuedCandidateWhoseTaskIsCancelledThrowsAndLeavesTheQueue() async throws {
        let gate = ClassPriorityGate()
        try await gate.enter(.transactional)
        let waiter = Task { try await gate.enter(.campaign) }
        try await eventually("the campaign candidate queued") { gate.queued[.campaign] == 1 }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(gate.queued[.campaign] == 0)
        gate.leave(.transactional)
        try await gate.enter(.campaign)  // passes at once
    }
}

extension DispatcherEngineSuites {
    /// Class priority on a running engine (`EngineWorld`: real PostgreSQL, librdkafka's mock cluster,
    /// the APNs simulator over TLS).
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(5)))
    struct ClassPriorityEngineTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        /// A campaign runs while a request waits for the transactional budget (one permit, held by a
        /// notification whose answer the simulator holds): the campaign's notifications queue at class
        /// priority (`push_admission_queued{class="campaign"}`) and none reaches Apple while the request
        /// waits; once the budget frees, the request is admitted and the campaign goes on. (Which of the
        /// two then reaches Apple first is up to the threads: the campaign's run on their own.) Before
        /// class priority the campaign's lane had room and its page went out while the request waited.
        @Test func aRequestWaitingForItsBudgetIsAdmittedBeforeARunningCampaignsQueuedWork() async throws {
            let world = try await EngineWorld()
            let campaignTokens = (0..<6).map { EngineWorld.token("c5", $0) }
            let busy = EngineWorld.token("a5"), waiting = EngineWorld.token("b5")
            var faults = APNsSimulatorFaults()
            faults.hold = .init(tokens: [busy])
            world.simulator.setFaults(faults)
            let engine = try world.startEngine {
                $0.maxInFlightNotifications = 1
                $0.maxInFlightPerPartition = 4
                $0.campaigns.runnerEnabled = true
                $0.campaigns.pageSize = 2
                $0.campaigns.pagesInFlight = 1
            }
            try await world.register(campaignTokens)
            try await eventually("the campaign's tokens registered") {
                try await world.pool.query("SELECT 1 FROM device_tokens WHERE device_token LIKE 'c5%'").count == campaignTokens.count
            }
            try await world.send("busy-1", to: [busy])
            try await eventually("the request holding the budget is in flight") { world.simulator.heldTokens() == [busy] }
            try await world.send("waiting-1", to: [waiting])
            try await eventually("the waiting request runs beside it") { engine.recordsInFlight == 2 }
            try await world.sendToAudience("campaign-5")
            try await eventually("the campaign's work queued behind the waiting request") {
                engine.registry.value("push_admission_queued", labels: ["campaign"]) ?? 0 >= 1
            }
            let sent = { (tokens: [String]) in
                world.simulator.receivedRequests().filter { record in tokens.contains { record.path == "/3/device/\($0)" } }.count
            }
            #expect(sent(campaignTokens) == 0 && sent([waiting]) == 0)
            world.simulator.releaseHeld(token: busy)
            try await eventually("the requests and the campaign completed") {
                world.feedback.completions("busy-1").count == 1 && world.feedback.completions("waiting-1").count == 1
                    && world.feedback.completions("campaign-5").count == 1
            }
            #expect(sent(campaignTokens) == campaignTokens.count && sent([waiting]) == 1)
            #expect(engine.registry.value("push_admission_queued", labels: ["campaign"]) == 0)
            try await engine.stop()
            await world.close()
        }
    }
}
