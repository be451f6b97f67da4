import Testing

@testable import DispatcherCore

/// The decision behind "a record whose request id is already running in this process joins the
/// running one" (docs/dispatcher-engine.md "Records handled again"), without I/O.
@Suite struct RunningRequestsTests {
    @Test func aSecondHandlingJoinsTheRunningOneAndFinishesWithoutRunningWhenItFinished() {
        var running = RunningRequests()
        let claims = [
            running.claim("r1", ticket: 1), running.claim("r1", ticket: 2), running.claim("r1", ticket: 3),
            // Another request is not held back by r1.
            running.claim("r2", ticket: 4),
        ]
        #expect(claims == [.run, .join, .join, .run])
        #expect(running.waiting("r1") == 2)
        let resumed = running.release("r1", finished: true)
        #expect(resumed.map(\.ticket) == [2, 3])
        #expect(resumed.allSatisfy { $0.turn == .finishedByOther })
        #expect(!running.isRunning("r1"))
        #expect(running.isRunning("r2"))
        // Handled again later (a redelivery after the request finished): it runs, alone.
        let later = running.claim("r1", ticket: 5)
        #expect(later == .run)
    }

    @Test func anUnfinishedEndHandsTheRequestToTheOldestJoinedHandlingOnly() {
        var running = RunningRequests()
        let claims = [running.claim("r1", ticket: 1), running.claim("r1", ticket: 2), running.claim("r1", ticket: 3)]
        #expect(claims == [.run, .join, .join])
        let handedOver = running.release("r1", finished: false)
        #expect(handedOver.map(\.ticket) == [2])
        #expect(handedOver.map(\.turn) == [.run])
        // The request is still running (now in the handling it passed to); the third one keeps waiting.
        #expect(running.isRunning("r1"))
        #expect(running.waiting("r1") == 1)
        let fourth = running.claim("r1", ticket: 4)
        #expect(fourth == .join)
        let finished = running.release("r1", finished: true)
        #expect(finished.map(\.ticket) == [3, 4])
        #expect(finished.allSatisfy { $0.turn == .finishedByOther })
        #expect(running.count == 0)
    }

    @Test func anUnfinishedEndWithNobodyWaitingFreesTheRequest() {
        var running = RunningRequests()
        let claim = running.claim("r1", ticket: 1)
        #expect(claim == .run)
        let unfinished = running.release("r1", finished: false)
        #expect(unfinished.isEmpty)
        #expect(!running.isRunning("r1"))
        let again = running.release("r1", finished: true)
        #expect(again.isEmpty)
    }

    @Test func aCancelledJoinedHandlingLeavesAndIsNeverResumed() {
        var running = RunningRequests()
        let claims = [running.claim("r1", ticket: 1), running.claim("r1", ticket: 2), running.claim("r1", ticket: 3)]
        #expect(claims == [.run, .join, .join])
        // Ticket 2 leaves; it was not waiting any more the second time; the running one (1) is no waiter.
        let left = [running.leave("r1", ticket: 2), running.leave("r1", ticket: 2), running.leave("r1", ticket: 1)]
        #expect(left == [true, false, false])
        let handedOver = running.release("r1", finished: false)
        #expect(handedOver.map(\.ticket) == [3])
        let resumedAlready = running.leave("r1", ticket: 3)
        #expect(!resumedAlready)
        let last = running.release("r1", finished: true)
        #expect(last.isEmpty)
        #expect(running.count == 0)
    }
}
