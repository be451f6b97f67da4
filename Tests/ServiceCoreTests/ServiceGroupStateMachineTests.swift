import Testing
@testable import ServiceCore

/// The group's decisions without tasks, timers or signals.
@Suite struct ServiceGroupStateMachineTests {
    struct Boom: Error {}

    @Test func firstSignalShutsDownGracefullySecondCancels() {
        var machine = ServiceGroupStateMachine(serviceCount: 2)
        #expect(machine.start() == .none)
        #expect(machine.handle(.signalReceived(15)) == .beginGracefulShutdown(.signal(15)))
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
        #expect(machine.handle(.shutdownRequested) == .beginGracefulShutdown(.requested))
        #expect(machine.handle(.gracePeriodElapsed) == .cancelServices(.escalatedAfterGracePeriod))
        #expect(machine.handle(.serviceFinished(index: 0, error: nil)) == .finish(.escalatedAfterGracePeriod))
    }

    @Test func gracefulShutdownThatCompletesIsGraceful() {
        var machine = ServiceGroupStateMachine(serviceCount: 2)
        #expect(machine.handle(.signalReceived(15)) == .beginGracefulShutdown(.signal(15)))
        #expect(machine.handle(.serviceFinished(index: 1, error: nil)) == .none)
        #expect(machine.handle(.serviceFinished(index: 0, error: nil)) == .finish(.graceful))
        // A late timer changes nothing.
        #expect(machine.handle(.gracePeriodElapsed) == .none)
    }

    @Test func aServiceReturningEarlyShutsDownTheRest() {
        var machine = ServiceGroupStateMachine(serviceCount: 3)
        #expect(machine.handle(.serviceFinished(index: 2, error: nil)) == .beginGracefulShutdown(.serviceReturned(index: 2)))
        #expect(machine.handle(.serviceFinished(index: 0, error: nil)) == .none)
        #expect(machine.runningCount == 1)
    }

    @Test func aFailingServiceShutsDownTheRestAndItsErrorIsKept() {
        var machine = ServiceGroupStateMachine(serviceCount: 2)
        #expect(machine.handle(.serviceFinished(index: 1, error: Boom())) == .beginGracefulShutdown(.serviceFailed(index: 1)))
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
}
