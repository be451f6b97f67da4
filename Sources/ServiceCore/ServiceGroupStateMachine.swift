/// The decisions of a `ServiceGroup`, without I/O: events in, one action out.
///
/// States: `running` → `shuttingDown` (graceful shutdown triggered, grace timer running) →
/// `cancelling` (escalated: services cancelled) → `finished`. Any state goes to `finished` once the
/// last service has returned; there is no way back.
///
/// - The first shutdown cause (a signal, `triggerGracefulShutdown()`, a service returning or throwing)
///   moves `running` to `shuttingDown` and asks for graceful shutdown and the grace timer.
/// - A signal while `shuttingDown` (the second one), the grace timer, or cancellation of `run()`
///   itself moves to `cancelling` and asks to cancel every service.
/// - A `CancellationError` from a service after escalation is the expected answer to it, not a failure.
struct ServiceGroupStateMachine {
    /// Why graceful shutdown began.
    enum ShutdownCause: Equatable, CustomStringConvertible {
        case signal(Int32)
        case requested
        case serviceReturned(index: Int)
        case serviceFailed(index: Int)

        var description: String {
            switch self {
            case .signal(let number): "signal \(number)"
            case .requested: "requested"
            case .serviceReturned(let index): "service \(index) returned"
            case .serviceFailed(let index): "service \(index) failed"
            }
        }
    }

    enum Event {
        /// The group's `GracefulShutdown` fired (from `triggerGracefulShutdown()` or a service).
        case shutdownRequested
        /// One of the configured signals arrived.
        case signalReceived(Int32)
        /// A service's `run(shutdown:)` returned (`error == nil`) or threw.
        case serviceFinished(index: Int, error: (any Error)?)
        /// The grace period started by `beginGracefulShutdown` is over.
        case gracePeriodElapsed
        /// The task running the group was cancelled.
        case runCancelled
    }

    enum Action: Equatable {
        /// Nothing to do; wait for the next event.
        case none
        /// Trigger the services' `GracefulShutdown` and start the grace timer.
        case beginGracefulShutdown(ShutdownCause)
        /// Cancel every service still running.
        case cancelServices(ServiceGroup.Outcome)
        /// Every service has returned: stop the helpers and end `run()`.
        case finish(ServiceGroup.Outcome)
    }

    enum State: Equatable {
        case running
        case shuttingDown
        case cancelling(ServiceGroup.Outcome)
        case finished(ServiceGroup.Outcome)
    }

    private(set) var state: State = .running
    private(set) var runningCount: Int
    /// The first error a service threw, other than the `CancellationError` expected after escalation.
    private(set) var firstError: (any Error)?
    private(set) var firstErrorIndex: Int?

    init(serviceCount: Int) {
        runningCount = serviceCount
    }

    /// Whether the group still needs to listen for signals.
    var wantsSignals: Bool {
        switch state {
        case .running, .shuttingDown: true
        case .cancelling, .finished: false
        }
    }

    /// The action for a group that has just started its services.
    mutating func start() -> Action {
        guard runningCount == 0 else { return .none }
        state = .finished(.graceful)
        return .finish(.graceful)
    }

    mutating func handle(_ event: Event) -> Action {
        switch event {
        case .shutdownRequested:
            return beginGracefulShutdown(.requested)

        case .signalReceived(let number):
            switch state {
            case .running:
                return beginGracefulShutdown(.signal(number))
            case .shuttingDown:
                return escalate(.escalatedBySignal(number))
            case .cancelling, .finished:
                return .none
            }

        case .gracePeriodElapsed:
            guard state == .shuttingDown else { return .none }
            return escalate(.escalatedAfterGracePeriod)

        case .runCancelled:
            switch state {
            case .running, .shuttingDown:
                return escalate(.cancelled)
            case .cancelling, .finished:
                return .none
            }

        case .serviceFinished(let index, let error):
            if case .finished = state { preconditionFailure("a service finished after the group had finished") }
            precondition(runningCount > 0, "more services finished than were started")
            runningCount -= 1
            let failure = error.flatMap { isExpectedCancellation($0) ? nil : $0 }
            if let failure, firstError == nil {
                firstError = failure
                firstErrorIndex = index
            }
            if runningCount == 0 {
                let outcome: ServiceGroup.Outcome
                if case .cancelling(let escalation) = state { outcome = escalation } else { outcome = .graceful }
                state = .finished(outcome)
                return .finish(outcome)
            }
            return beginGracefulShutdown(failure == nil ? .serviceReturned(index: index) : .serviceFailed(index: index))
        }
    }

    private mutating func beginGracefulShutdown(_ cause: ShutdownCause) -> Action {
        guard state == .running else { return .none }
        state = .shuttingDown
        return .beginGracefulShutdown(cause)
    }

    private mutating func escalate(_ outcome: ServiceGroup.Outcome) -> Action {
        state = .cancelling(outcome)
        return .cancelServices(outcome)
    }

    private func isExpectedCancellation(_ error: any Error) -> Bool {
        guard case .cancelling = state else { return false }
        return error is CancellationError
    }
}
