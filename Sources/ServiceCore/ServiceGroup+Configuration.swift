import Foundation

extension ServiceGroup {
    /// How a `ServiceGroup` reacts to signals, how long it lets graceful shutdown take and in which
    /// order it asks its services to stop (docs/lifecycle.md).
    public struct Configuration: Sendable {
        /// Signals the group listens to while it runs. The first occurrence of any of them triggers
        /// graceful shutdown; the next occurrence of any of them (the second signal) cancels every
        /// service at once. Empty: the group installs no signal handling (tests, nested groups).
        /// Listening replaces these signals' default action (termination) for the rest of the process;
        /// see `ProcessSignals.signals(_:)`. Default `[SIGTERM, SIGINT]`.
        public var signals: [Int32] = [SIGTERM, SIGINT]
        /// Upper bound on graceful shutdown, measured from its start; when it elapses the group cancels
        /// every service still running. `nil`: no timer of its own — a nested group, bounded by the
        /// grace period of the outermost group (one cancellation bound for the whole tree). Default 30 s.
        public var gracePeriod: Duration? = .seconds(30)
        /// In which order graceful shutdown reaches the services. Default `concurrent`.
        public var shutdownOrder: ShutdownOrder = .concurrent

        /// Creates a configuration.
        /// - Parameters:
        ///   - signals: see `signals`; default `[SIGTERM, SIGINT]`.
        ///   - gracePeriod: see `gracePeriod`; default 30 seconds.
        ///   - shutdownOrder: see `shutdownOrder`; default `concurrent`.
        public init(signals: [Int32] = [SIGTERM, SIGINT], gracePeriod: Duration? = .seconds(30), shutdownOrder: ShutdownOrder = .concurrent) {
            self.signals = signals
            self.gracePeriod = gracePeriod
            self.shutdownOrder = shutdownOrder
        }

        /// A group run as a service of another group: no signals, no grace timer (the parent's
        /// trigger and cancellation reach it; the outermost grace period bounds it).
        public static func nested(shutdownOrder: ShutdownOrder) -> Configuration {
            Configuration(signals: [], gracePeriod: nil, shutdownOrder: shutdownOrder)
        }
    }

    /// In which order graceful shutdown reaches a group's services.
    public enum ShutdownOrder: Sendable, Hashable {
        /// Every service is asked at once (sources that stop independently of each other).
        case concurrent
        /// The last service started is asked first; each next one only once the one after it in the
        /// list has finished (infrastructure: what was opened first is closed last).
        case reverseStartOrder
    }

    /// What the group does when a service's `run(shutdown:)` ends (docs/lifecycle.md "Termination
    /// behaviour").
    public enum TerminationBehavior: Sendable, Hashable, CustomStringConvertible {
        /// Graceful shutdown of the group (nothing more while it is already shutting down).
        case shutDownGroup
        /// Cancel every service at once. While the group shuts down, only a throw, or a return before
        /// the service was asked to stop, cancels.
        case cancelGroup
        /// Nothing: the other services keep running (the group still ends with its last service).
        case ignore

        /// The case's name, for logs.
        public var description: String {
            switch self {
            case .shutDownGroup: "shutDownGroup"
            case .cancelGroup: "cancelGroup"
            case .ignore: "ignore"
            }
        }
    }

    /// A service with its name and termination behaviours.
    public struct ServiceConfiguration: Sendable {
        /// The service.
        public var service: any Service
        /// Its name in the group's logs. Default: its type's name.
        public var name: String
        /// What the group does when `run(shutdown:)` returns. Default `shutDownGroup`.
        public var successTerminationBehavior: TerminationBehavior
        /// What the group does when `run(shutdown:)` throws. Default `shutDownGroup`.
        public var failureTerminationBehavior: TerminationBehavior

        /// - Parameters: see the properties.
        public init(
            _ service: any Service, name: String? = nil, successTerminationBehavior: TerminationBehavior = .shutDownGroup,
            failureTerminationBehavior: TerminationBehavior = .shutDownGroup
        ) {
            self.service = service
            self.name = name ?? String(describing: type(of: service))
            self.successTerminationBehavior = successTerminationBehavior
            self.failureTerminationBehavior = failureTerminationBehavior
        }
    }
}
