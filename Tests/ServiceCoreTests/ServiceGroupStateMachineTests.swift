import Testing
@testable import ServiceCore

/// The group's decisions without tasks, timers or signals.
@Suite struct ServiceGroupStateMachineTests {
    struct Boom: Error {}

    @Test func firstSignalShutsDownGracefullySecondCancels() {
        var machine = ServiceGroupStateMachine(serviceCount: 2)
        #expect(machine.start() == .none)
        #expect(machine.handle(.signalReceived(15)) == .beginGracefulShutdown(.signal(15), services: [0, 1]))
        #expect(machine.state == .shuttingDown)
        // The group's own trigger comes back as an event: nothing more to do.
        #expect(machine.handle(.shutdownRequested) == .none)
        #expect(machine.handle(.signalReceived(2)) == .cancelServices(.escalatedBySignal(2)))
        #expect(machine.handle(.signalReceived(2)) == .none)
        #expect(machine.handle(.gracePeriodElapsed) == .none)
        #expect(machine.handle(.serviceFinished(index: 0, error: CancellationError())) == .none)
        #expect(machine.handle(.serviceFinished(index: 1, error: nil)) == .finish(.escalatedBySignal(2)))
        // Cancellation after escalation is the expected reply, not a failure.
        #expect(machine.firstError == nil)
    }

    @Test func gracePeriodEscalatesOnlyDuringShutdown() {
        var machine = ServiceGroupStateMachine(serviceCount: 1)
        #expect(machine.handle(.gracePeriodElapsed) == .none)
        #expect(machine.state == .running)
        #expect(machine.handle(.shutdownRequested) == .beginGracefulShutdown(.requested, services: [0]))
        #expect(machine.handle(.gracePeriodElapsed) == .cancelServices(.escalatedAfterGracePeriod))
        #expect(machine.handle(.serviceFinished(index: 0, error: nil)) == .finish(.escalatedAfterGracePeriod))
    }

    @Test func gracefulShutdownThatCompletesIsGraceful() {
        var machine = ServiceGroupStateMachine(serviceCount: 2)
        #expect(machine.handle(.signalReceived(15)) == .beginGracefulShutdown(.signal(15), services: [0, 1]))
        #expect(machine.handle(.serviceFinished(index: 1, error: nil)) == .none)
        #expect(machine.handle(.serviceFinished(index: 0, error: nil)) == .finish(.graceful))
        // A late timer changes nothing.
        #expect(machine.handle(.gracePeriodElapsed) == .none)
    }

    @Test func aServiceReturningEarlyShutsDownTheRest() {
        var machine = ServiceGroupStateMachine(serviceCount: 3)
        #expect(machine.handle(.serviceFinished(index: 2, error: nil)) == .beginGracefulShutdown(.serviceReturned(index: 2), services: [0, 1]))
        #expect(machine.handle(.serviceFinished(index: 0, error: nil)) == .none)
        #expect(machine.runningCount == 1)
    }

    @Test func aFailingServiceShutsDownTheRestAndItsErrorIsKept() {
        var machine = ServiceGroupStateMachine(serviceCount: 2)
        #expect(machine.handle(.serviceFinished(index: 1, error: Boom())) == .beginGracefulShutdown(.serviceFailed(index: 1), services: [0]))
        #expect(machine.handle(.serviceFinished(index: 0, error: CancellationError())) == .finish(.graceful))
        #expect(machine.firstError is Boom)
        #expect(machine.firstErrorIndex == 1)
    }

    @Test func cancellationBeforeEscalationIsAnError() {
        // A service that throws CancellationError on its own (nobody cancelled it) failed.
        var machine = ServiceGroupStateMachine(serviceCount: 1)
        #expect(machine.handle(.serviceFinished(index: 0, error: CancellationError())) == .finish(.graceful))
        #expect(machine.firstError is CancellationError)
    }

    @Test func cancellingRunEscalatesAtOnce() {
        var machine = ServiceGroupStateMachine(serviceCount: 1)
        #expect(machine.handle(.runCancelled) == .cancelServices(.cancelled))
        #expect(!machine.wantsSignals)
        #expect(machine.handle(.signalReceived(15)) == .none)
        #expect(machine.handle(.serviceFinished(index: 0, error: CancellationError())) == .finish(.cancelled))
    }

    @Test func noServicesFinishesAtOnce() {
        var machine = ServiceGroupStateMachine(serviceCount: 0)
        #expect(machine.start() == .finish(.graceful))
    }

    // MARK: Shutdown order

    @Test func reverseStartOrderAsksOneServiceAtATimeLastStartedFirst() {
        var machine = ServiceGroupStateMachine(serviceCount: 3, order: .reverseStartOrder)
        #expect(machine.handle(.signalReceived(15)) == .beginGracefulShutdown(.signal(15), services: [2]))
        #expect(machine.services == [.running, .running, .stopping])
        // Nothing new while the one asked is still stopping.
        #expect(machine.handle(.shutdownRequested) == .none)
        #expect(machine.handle(.serviceFinished(index: 2, error: nil)) == .shutDown([1]))
        #expect(machine.handle(.serviceFinished(index: 1, error: nil)) == .shutDown([0]))
        #expect(machine.handle(.serviceFinished(index: 0, error: nil)) == .finish(.graceful))
    }

    @Test func aServiceEndingOutOfTurnIsSkippedInTheOrder() {
        var machine = ServiceGroupStateMachine(serviceCount: 3, order: .reverseStartOrder)
        #expect(machine.handle(.shutdownRequested) == .beginGracefulShutdown(.requested, services: [2]))
        // Service 1 ends before its turn: the order goes on with the one being asked.
        #expect(machine.handle(.serviceFinished(index: 1, error: nil)) == .none)
        #expect(machine.handle(.serviceFinished(index: 2, error: nil)) == .shutDown([0]))
        #expect(machine.handle(.serviceFinished(index: 0, error: nil)) == .finish(.graceful))
    }

    @Test func aServiceEndingOnItsOwnStartsTheOrderFromTheLastStillRunning() {
        var machine = ServiceGroupStateMachine(serviceCount: 3, order: .reverseStartOrder)
        #expect(machine.handle(.serviceFinished(index: 2, error: nil)) == .beginGracefulShutdown(.serviceReturned(index: 2), services: [1]))
        #expect(machine.handle(.serviceFinished(index: 1, error: nil)) == .shutDown([0]))
    }

    @Test func escalationDuringOrderedShutdownCancelsEveryoneLeft() {
        var machine = ServiceGroupStateMachine(serviceCount: 3, order: .reverseStartOrder)
        #expect(machine.handle(.shutdownRequested) == .beginGracefulShutdown(.requested, services: [2]))
        #expect(machine.handle(.gracePeriodElapsed) == .cancelServices(.escalatedAfterGracePeriod))
        // After escalation no one is asked any more: they are all cancelled.
        #expect(machine.handle(.serviceFinished(index: 2, error: CancellationError())) == .none)
        #expect(machine.services == [.running, .running, .finished])
        #expect(machine.handle(.serviceFinished(index: 0, error: CancellationError())) == .none)
        #expect(machine.handle(.serviceFinished(index: 1, error: CancellationError())) == .finish(.escalatedAfterGracePeriod))
        #expect(machine.firstError == nil)
    }

    // MARK: Termination behaviour

    @Test func ignoredServicesEndWithoutStoppingTheGroup() {
        let ignored = ServiceGroupStateMachine.Behaviour(onSuccess: .ignore, onFailure: .ignore)
        var machine = ServiceGroupStateMachine(behaviours: [ignored, ignored, .init()])
        #expect(machine.handle(.serviceFinished(index: 0, error: nil)) == .none)
        #expect(machine.handle(.serviceFinished(index: 1, error: Boom())) == .none)
        #expect(machine.state == .running)
        // The error is kept for run() all the same.
        #expect(machine.firstError is Boom && machine.firstErrorIndex == 1)
        #expect(machine.handle(.serviceFinished(index: 2, error: nil)) == .finish(.graceful))
    }

    @Test func aCancelGroupServiceEndingCancelsTheOthers() {
        let critical = ServiceGroupStateMachine.Behaviour(onSuccess: .cancelGroup, onFailure: .cancelGroup)
        var machine = ServiceGroupStateMachine(behaviours: [critical, .init()])
        #expect(machine.handle(.serviceFinished(index: 0, error: Boom())) == .cancelServices(.escalatedByService(index: 0)))
        #expect(machine.handle(.serviceFinished(index: 1, error: CancellationError())) == .finish(.escalatedByService(index: 0)))
        #expect(machine.firstError is Boom)
    }

    @Test func successAndFailureBehavioursAreSeparate() {
        // Returning is fine (ignore), throwing takes the group down gracefully.
        let behaviour = ServiceGroupStateMachine.Behaviour(onSuccess: .ignore, onFailure: .shutDownGroup)
        var returned = ServiceGroupStateMachine(behaviours: [behaviour, .init()])
        #expect(returned.handle(.serviceFinished(index: 0, error: nil)) == .none)
        var failed = ServiceGroupStateMachine(behaviours: [behaviour, .init()])
        #expect(failed.handle(.serviceFinished(index: 0, error: Boom())) == .beginGracefulShutdown(.serviceFailed(index: 0), services: [1]))
    }

    @Test func aCancelGroupServiceAnsweringItsStopIsExpectedButOneEndingOutOfTurnEscalates() {
        let critical = ServiceGroupStateMachine.Behaviour(onSuccess: .cancelGroup, onFailure: .cancelGroup)
        var answering = ServiceGroupStateMachine(behaviours: [.init(), critical], order: .reverseStartOrder)
        #expect(answering.handle(.shutdownRequested) == .beginGracefulShutdown(.requested, services: [1]))
        #expect(answering.handle(.serviceFinished(index: 1, error: nil)) == .shutDown([0]))

        var early = ServiceGroupStateMachine(behaviours: [critical, .init()], order: .reverseStartOrder)
        #expect(early.handle(.shutdownRequested) == .beginGracefulShutdown(.requested, services: [1]))
        #expect(early.handle(.serviceFinished(index: 0, error: nil)) == .cancelServices(.escalatedByService(index: 0)))
    }
}
