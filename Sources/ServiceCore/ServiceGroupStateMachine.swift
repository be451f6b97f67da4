/// The decisions of a `ServiceGroup`, without I/O: events in, one action out (docs/lifecycle.md
/// "States of a service group").
///
/// Group states: `running` → `shuttingDown` (graceful shutdown begun, grace timer running when the
/// group has one) → `cancelling` (escalated: services cancelled) → `finished`. Any state goes to
/// `finished` once the last service has returned; there is no way back.
///
/// Each service: `running` → `stopping` (its `GracefulShutdown` triggered) → `finished`. Which
/// services are asked to stop, and when, follows the group's `ShutdownOrder`: all at once
/// (`concurrent`), or the last started first, the next only once it has finished
/// (`reverseStartOrder`).
///
/// - The first shutdown cause (a signal, `triggerGracefulShutdown()` or the parent's trigger, a
///   service ending whose termination behaviour is `shutDownGroup`) moves `running` to `shuttingDown`.
/// - A signal while `shuttingDown` (the second one), the grace timer, cancellation of `run()` itself,
///   or a service ending whose termination behaviour is `cancelGroup` moves to `cancelling`.
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
        /// The group's own trigger fired (`triggerGracefulShutdown()`, or the parent group's trigger).
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
        /// Start the grace timer (when the group has one) and trigger the `GracefulShutdown` of the
        /// services at these indexes.
        case beginGracefulShutdown(ShutdownCause, services: [Int])
        /// Trigger the `GracefulShutdown` of the services at these indexes (the next in the order).
        case shutDown([Int])
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

    /// Where one service is in its life.
    enum ServiceState: Equatable {
        case running
        /// Its graceful shutdown was triggered.
        case stopping
        case finished
    }

    /// What the group does when one service ends.
    struct Behaviour: Equatable {
        var onSuccess: ServiceGroup.TerminationBehavior = .shutDownGroup
        var onFailure: ServiceGroup.TerminationBehavior = .shutDownGroup
    }

    private(set) var state: State = .running
    private(set) var services: [ServiceState]
    private let behaviours: [Behaviour]
    private let order: ServiceGroup.ShutdownOrder
    /// The first error a service threw, other than the `CancellationError` expected after escalation.
    private(set) var firstError: (any Error)?
    private(set) var firstErrorIndex: Int?

    /// - Parameters:
    ///   - behaviours: one per service, in start order.
    ///   - order: how graceful shutdown reaches the services.
    init(behaviours: [Behaviour], order: ServiceGroup.ShutdownOrder = .concurrent) {
        self.behaviours = behaviours
        self.services = Array(repeating: .running, count: behaviours.count)
        self.order = order
    }

    /// `serviceCount` services that shut the group down gracefully when they end, stopped concurrently.
    init(serviceCount: Int, order: ServiceGroup.ShutdownOrder = .concurrent) {
        self.init(behaviours: Array(repeating: Behaviour(), count: serviceCount), order: order)
    }

    /// Services that have not returned yet.
    var runningCount: Int { services.count { $0 != .finished } }

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
            return serviceFinished(index, error: error)
        }
    }

    private mutating func serviceFinished(_ index: Int, error: (any Error)?) -> Action {
        if case .finished = state { preconditionFailure("a service finished after the group had finished") }
        precondition(services[index] != .finished, "service \(index) finished twice")
        let wasAsked = services[index] == .stopping
        services[index] = .finished
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
        let behaviour = failure == nil ? behaviours[index].onSuccess : behaviours[index].onFailure
        switch state {
        case .running:
            switch behaviour {
            case .ignore: return .none
            case .shutDownGroup: return beginGracefulShutdown(failure == nil ? .serviceReturned(index: index) : .serviceFailed(index: index))
            case .cancelGroup: return escalate(.escalatedByService(index: index))
            }
        case .shuttingDown:
            // A reply to being asked is expected; a failure, or an end nobody asked for, is not.
            if behaviour == .cancelGroup, failure != nil || !wasAsked { return escalate(.escalatedByService(index: index)) }
            return shutDownNext()
        case .cancelling, .finished:
            return .none
        }
    }

    private mutating func beginGracefulShutdown(_ cause: ShutdownCause) -> Action {
        guard state == .running else { return .none }
        state = .shuttingDown
        let next = nextToStop()
        return .beginGracefulShutdown(cause, services: next)
    }

    /// During ordered shutdown, asks the next service once none is stopping.
    private mutating func shutDownNext() -> Action {
        let next = nextToStop()
        return next.isEmpty ? .none : .shutDown(next)
    }

    /// The services to ask now (marked `stopping`): every running one (`concurrent`), or the last
    /// started one still running when no other is stopping (`reverseStartOrder`).
    private mutating func nextToStop() -> [Int] {
        let next: [Int]
        switch order {
        case .concurrent:
            next = services.indices.filter { services[$0] == .running }
        case .reverseStartOrder:
            guard !services.contains(.stopping), let last = services.lastIndex(of: .running) else { return [] }
            next = [last]
        }
        for index in next { services[index] = .stopping }
        return next
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
