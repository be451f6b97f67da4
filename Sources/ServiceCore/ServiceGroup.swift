import Foundation

/// Runs services concurrently, shuts them down gracefully on SIGTERM/SIGINT in a chosen order, and
/// escalates to cancellation only when graceful shutdown is not enough (after the design of
/// swift-service-lifecycle; docs/lifecycle.md).
///
/// Lifecycle of `run()`:
/// 1. Every service's `run(shutdown:)` starts in a child task, in the order given; each gets a
///    `GracefulShutdown` of its own.
/// 2. Graceful shutdown begins at the first of: a configured signal, `triggerGracefulShutdown()` (or,
///    for a nested group, its parent's trigger), or a service ending whose termination behaviour is
///    `shutDownGroup` (the default). The group starts its grace timer, when it has one, and asks its
///    services to stop: all at once (`ShutdownOrder.concurrent`) or the last started first, each next
///    one once the one after it has finished (`reverseStartOrder`).
/// 3. Escalation: a second signal, the grace period elapsing, cancellation of the task running the
///    group, or a service ending whose termination behaviour is `cancelGroup` cancels every service
///    still running.
/// 4. `run()` returns once every service has returned.
///
/// A group is itself a `Service`: nested in another group (`Configuration.nested(shutdownOrder:)`),
/// it stops when the parent asks it to and is cancelled when the parent is, so that the outermost
/// grace period bounds the whole tree.
///
/// Decisions are made by `ServiceGroupStateMachine`; every step is logged.
///
/// ```swift
/// let group = ServiceGroup(services: [server, consumer], configuration: .init(), logger: logger)
/// let outcome = try await group.run()
/// exit(outcome.isGraceful ? 0 : 1)
/// ```
public struct ServiceGroup: Service {
    private let services: [ServiceConfiguration]
    private let configuration: Configuration
    private let logger: Logger
    /// The group's own trigger: `triggerGracefulShutdown()` and, nested, the parent's trigger.
    private let requested = GracefulShutdown()

    /// Creates a group of services that shut the group down gracefully when they end; nothing starts
    /// before `run()`.
    /// - Parameters:
    ///   - services: the services, started in this order (they then run concurrently).
    ///   - configuration: signals, grace period and shutdown order.
    ///   - logger: receives one record per lifecycle step.
    public init(services: [any Service], configuration: Configuration = .init(), logger: Logger) {
        self.init(configuredServices: services.map { ServiceConfiguration($0) }, configuration: configuration, logger: logger)
    }

    /// Creates a group of services with their names and termination behaviours; nothing starts before
    /// `run()`.
    /// - Parameters:
    ///   - configuredServices: the services, started in this order (they then run concurrently).
    ///   - configuration: signals, grace period and shutdown order.
    ///   - logger: receives one record per lifecycle step.
    public init(configuredServices: [ServiceConfiguration], configuration: Configuration = .init(), logger: Logger) {
        self.services = configuredServices
        self.configuration = configuration
        self.logger = logger
    }

    /// Starts graceful shutdown as the first signal would; later calls do nothing (in particular they
    /// never escalate). Callable before, during or after `run()`; before, the group begins its
    /// graceful shutdown as soon as it runs.
    public func triggerGracefulShutdown() {
        requested.trigger()
    }

    /// Runs every service concurrently until all have returned. Call it once per group.
    /// - Returns: `.graceful` when no service had to be cancelled, otherwise why they were cancelled.
    /// - Throws: the first error a service threw (in the order they finished), once every service has
    ///   returned; a `CancellationError` thrown after escalation counts as the expected reply to it.
    @discardableResult
    public func run() async throws -> Outcome {
        // Subscribe before any service starts, so that no signal falls between the two.
        let signalStream = configuration.signals.isEmpty ? nil : ProcessSignals.signals(configuration.signals)
        let names = services.map(\.name)
        logger.info("service group starting", [
            "services": names.joined(separator: ","),
            "signals": configuration.signals.map(String.init).joined(separator: ","),
            "grace_period": configuration.gracePeriod.map { "\($0)" } ?? "the parent's",
            "shutdown_order": "\(configuration.shutdownOrder)",
        ])
        let triggers = services.map { _ in GracefulShutdown() }
        let (outcome, error) = await withTaskGroup(of: ChildResult.self) { group in
            var machine = ServiceGroupStateMachine(
                behaviours: services.map { .init(onSuccess: $0.successTerminationBehavior, onFailure: $0.failureTerminationBehavior) },
                order: configuration.shutdownOrder)
            startChildren(&group, triggers: triggers, signalStream: signalStream)
            var events: [ServiceGroupStateMachine.Event] = []
            var actions = [machine.start()]
            var sawCancellation = false
            while true {
                for action in actions {
                    if let outcome = perform(action, &group, triggers: triggers, names: names, running: machine.runningCount) {
                        return (outcome, machine.firstError)
                    }
                }
                if !Task.isCancelled || sawCancellation {
                    guard let child = await group.next() else {
                        preconditionFailure("the service group ran out of child tasks before its services finished")
                    }
                    if let event = event(for: child, names: names, expectingCancellation: Task.isCancelled || !machine.wantsSignals) {
                        events.append(event)
                    }
                }
                // Cancellation of `run()` may have come while waiting: it precedes what it caused
                // (a service ending with `CancellationError` is then no failure).
                if Task.isCancelled && !sawCancellation {
                    sawCancellation = true
                    events.insert(.runCancelled, at: 0)
                }
                actions = events.map { machine.handle($0) }
                if events.contains(where: { if case .signalReceived = $0 { true } else { false } }),
                   machine.wantsSignals, let signalStream {
                    group.addTask { await Self.nextSignal(signalStream) }
                }
                events.removeAll()
            }
        }
        if let error {
            logger.error("service group finished with an error", ["outcome": outcome.description, "error": "\(error)"])
            throw error
        }
        logger.info("service group finished", ["outcome": outcome.description])
        return outcome
    }

    /// Runs the group as a service of another group: `shutdown` (the parent's trigger) begins its
    /// graceful shutdown, cancellation by the parent cancels its services.
    /// - Throws: the first error a service threw; `CancellationError` when the services were
    ///   cancelled because the parent cancelled the group; `NotGraceful` when the group escalated on its
    ///   own (a service with termination behaviour `cancelGroup`).
    public func run(shutdown: GracefulShutdown) async throws {
        let link = shutdown.onTrigger { [requested] in requested.trigger() }
        defer { shutdown.removeHandler(link) }
        let outcome = try await run()
        switch outcome {
        case .graceful: return
        case .cancelled: throw CancellationError()
        default: throw NotGraceful(outcome: outcome)
        }
    }

    /// A nested group had to cancel its services for a reason of its own.
    public struct NotGraceful: Error, CustomStringConvertible {
        /// Why it cancelled them.
        public let outcome: Outcome
        /// For logs: `service group escalated: …`.
        public var description: String { "service group escalated: \(outcome)" }
    }

    /// Starts one child task per service, the waiter for `triggerGracefulShutdown()` and, when the group
    /// listens to signals, the first signal listener.
    private func startChildren(_ group: inout TaskGroup<ChildResult>, triggers: [GracefulShutdown], signalStream: AsyncStream<Int32>?) {
        for (index, configured) in services.enumerated() {
            let shutdown = triggers[index]
            group.addTask {
                do {
                    try await configured.service.run(shutdown: shutdown)
                    return .serviceFinished(index: index, error: nil)
                } catch {
                    return .serviceFinished(index: index, error: error)
                }
            }
        }
        let requested = self.requested
        group.addTask {
            await requested.wait()
            return requested.isTriggered ? .shutdownRequested : .helperEnded
        }
        if let signalStream { group.addTask { await Self.nextSignal(signalStream) } }
    }

    /// Carries out one action of the state machine on the running group.
    /// - Returns: the group's outcome when the action is `.finish`, otherwise nil.
    private func perform(_ action: ServiceGroupStateMachine.Action, _ group: inout TaskGroup<ChildResult>,
                         triggers: [GracefulShutdown], names: [String], running: Int) -> Outcome? {
        switch action {
        case .none:
            break
        case .beginGracefulShutdown(let cause, let indexes):
            logger.notice("graceful shutdown started", [
                "cause": describe(cause, names), "grace_period": configuration.gracePeriod.map { "\($0)" } ?? "the parent's",
                "stopping": indexes.map { names[$0] }.joined(separator: ","),
            ])
            for index in indexes { triggers[index].trigger() }
            if let gracePeriod = configuration.gracePeriod {
                group.addTask {
                    do {
                        try await Task.sleep(for: gracePeriod)
                        return .gracePeriodElapsed
                    } catch {
                        return .helperEnded
                    }
                }
            }
        case .shutDown(let indexes):
            logger.info("next services asked to stop", ["stopping": indexes.map { names[$0] }.joined(separator: ",")])
            for index in indexes { triggers[index].trigger() }
        case .cancelServices(let outcome):
            logger.warning("shutdown escalated: cancelling services", [
                "reason": outcome.description, "still_running": "\(running)",
            ])
            group.cancelAll()
        case .finish(let outcome):
            group.cancelAll()  // the helpers: signal listener, trigger waiter, grace timer
            return outcome
        }
        return nil
    }

    /// The state machine's event for a child that ended, logged; nil for a helper ended by cancellation.
    /// - Parameter expectingCancellation: a service ending with `CancellationError` is the expected reply
    ///   to escalation or to the cancellation of `run()`, logged as cancelled rather than failed.
    private func event(for child: ChildResult, names: [String], expectingCancellation: Bool) -> ServiceGroupStateMachine.Event? {
        switch child {
        case .serviceFinished(let index, let error):
            if let error {
                if error is CancellationError, expectingCancellation {
                    logger.info("service cancelled", ["service": names[index]])
                } else {
                    logger.error("service failed", ["service": names[index], "error": "\(error)"])
                }
            } else {
                logger.info("service finished", ["service": names[index]])
            }
            return .serviceFinished(index: index, error: error)
        case .shutdownRequested:
            return .shutdownRequested
        case .signal(let number):
            logger.notice("signal received", ["signal": "\(number)"])
            return .signalReceived(number)
        case .gracePeriodElapsed:
            return .gracePeriodElapsed
        case .helperEnded:
            return nil
        }
    }

    private func describe(_ cause: ServiceGroupStateMachine.ShutdownCause, _ names: [String]) -> String {
        switch cause {
        case .serviceReturned(let index): "\(names[index]) returned"
        case .serviceFailed(let index): "\(names[index]) failed"
        default: cause.description
        }
    }

    /// What a child task of `run()` reports when it ends.
    private enum ChildResult: Sendable {
        case serviceFinished(index: Int, error: (any Error)?)
        case shutdownRequested
        case signal(Int32)
        case gracePeriodElapsed
        /// A helper (signal listener, trigger waiter, grace timer) ended by cancellation.
        case helperEnded
    }

    /// Waits for the next signal on `stream` (a fresh iterator per call; calls never overlap).
    private static func nextSignal(_ stream: AsyncStream<Int32>) async -> ChildResult {
        var iterator = stream.makeAsyncIterator()
        guard let number = await iterator.next() else { return .helperEnded }
        return .signal(number)
    }
}
