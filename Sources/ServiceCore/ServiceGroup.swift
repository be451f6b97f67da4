import Foundation

/// Runs a process's services concurrently, shuts them down gracefully on SIGTERM/SIGINT, and
/// escalates to cancellation only when graceful shutdown is not enough (the design of
/// swift-service-lifecycle).
///
/// Lifecycle of `run()`:
/// 1. Every service's `run(shutdown:)` starts in a child task; all share one `GracefulShutdown`.
/// 2. Graceful shutdown begins at the first of: a configured signal, `triggerGracefulShutdown()`,
///    a service triggering the shared `GracefulShutdown`, or any service returning or throwing
///    (a service that ends on its own takes the rest down with it). The group triggers the
///    `GracefulShutdown` and starts a timer of `Configuration.gracePeriod`.
/// 3. Escalation: a second signal, the grace period elapsing, or cancellation of the task running
///    `run()` cancels every service still running.
/// 4. `run()` returns once every service has returned.
///
/// Decisions are made by `ServiceGroupStateMachine`; every step is logged.
///
/// ```swift
/// let group = ServiceGroup(services: [server, consumer], configuration: .init(), logger: logger)
/// let outcome = try await group.run()
/// exit(outcome.isGraceful ? 0 : 1)
/// ```
public struct ServiceGroup: Sendable {
    private let services: [any Service]
    private let configuration: Configuration
    private let logger: Logger
    private let shutdown = GracefulShutdown()

    /// Creates a group; nothing starts before `run()`.
    /// - Parameters:
    ///   - services: the services, started in this order (they then run concurrently).
    ///   - configuration: signals and grace period.
    ///   - logger: receives one record per lifecycle step.
    public init(services: [any Service], configuration: Configuration = .init(), logger: Logger) {
        self.services = services
        self.configuration = configuration
        self.logger = logger
    }

    /// Starts graceful shutdown as the first signal would; later calls do nothing (in particular they
    /// never escalate). Callable before, during or after `run()`; before, the services see an already
    /// triggered `GracefulShutdown`.
    public func triggerGracefulShutdown() {
        shutdown.trigger()
    }

    /// Runs every service concurrently until all have returned. Call it once per group.
    /// - Returns: `.graceful` when no service had to be cancelled, otherwise why they were cancelled.
    /// - Throws: the first error a service threw (in the order they finished), once every service has
    ///   returned; a `CancellationError` thrown after escalation counts as the expected reply to it.
    @discardableResult
    public func run() async throws -> Outcome {
        // Subscribe before any service starts, so that no signal falls between the two.
        let signalStream = configuration.signals.isEmpty ? nil : ProcessSignals.signals(configuration.signals)
        let names = services.map { String(describing: type(of: $0)) }
        logger.info("service group starting", [
            "services": names.joined(separator: ","),
            "signals": configuration.signals.map(String.init).joined(separator: ","),
            "grace_period": "\(configuration.gracePeriod)",
        ])
        let (outcome, error) = await withTaskGroup(of: ChildResult.self) { group in
            var machine = ServiceGroupStateMachine(serviceCount: services.count)
            for (index, service) in services.enumerated() {
                let shutdown = self.shutdown
                group.addTask {
                    do {
                        try await service.run(shutdown: shutdown)
                        return .serviceFinished(index: index, error: nil)
                    } catch {
                        return .serviceFinished(index: index, error: error)
                    }
                }
            }
            let shutdown = self.shutdown
            group.addTask {
                await shutdown.wait()
                return shutdown.isTriggered ? .shutdownRequested : .helperEnded
            }
            if let signalStream { group.addTask { await Self.nextSignal(signalStream) } }

            var events: [ServiceGroupStateMachine.Event] = []
            var actions = [machine.start()]
            var sawCancellation = false
            while true {
                for action in actions {
                    switch action {
                    case .none:
                        break
                    case .beginGracefulShutdown(let cause):
                        logger.notice("graceful shutdown started", ["cause": cause.description, "grace_period": "\(configuration.gracePeriod)"])
                        self.shutdown.trigger()
                        let gracePeriod = configuration.gracePeriod
                        group.addTask {
                            do {
                                try await Task.sleep(for: gracePeriod)
                                return .gracePeriodElapsed
                            } catch {
                                return .helperEnded
                            }
                        }
                    case .cancelServices(let outcome):
                        logger.warning("shutdown escalated: cancelling services", [
                            "reason": outcome.description, "still_running": "\(machine.runningCount)",
                        ])
                        group.cancelAll()
                    case .finish(let outcome):
                        group.cancelAll()  // the helpers: signal listener, trigger waiter, grace timer
                        return (outcome, machine.firstError)
                    }
                }

                if !Task.isCancelled || sawCancellation {
                    guard let child = await group.next() else {
                        preconditionFailure("the service group ran out of child tasks before its services finished")
                    }
                    switch child {
                    case .serviceFinished(let index, let error):
                        if let error {
                            logger.error("service failed", ["service": names[index], "error": "\(error)"])
                        } else {
                            logger.info("service finished", ["service": names[index]])
                        }
                        events.append(.serviceFinished(index: index, error: error))
                    case .shutdownRequested:
                        events.append(.shutdownRequested)
                    case .signal(let number):
                        logger.notice("signal received", ["signal": "\(number)"])
                        events.append(.signalReceived(number))
                    case .gracePeriodElapsed:
                        events.append(.gracePeriodElapsed)
                    case .helperEnded:
                        break
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
