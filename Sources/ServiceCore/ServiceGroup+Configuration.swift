import Foundation

extension ServiceGroup {
    /// How a `ServiceGroup` reacts to signals and how long it lets graceful shutdown take.
    public struct Configuration: Sendable {
        /// Signals the group listens to while it runs. The first occurrence of any of them triggers
        /// graceful shutdown; the next occurrence of any of them (the second signal) cancels every
        /// service at once. Empty: the group installs no signal handling (tests, embedded groups).
        /// Listening replaces these signals' default action (termination) for the rest of the process;
        /// see `ProcessSignals.signals(_:)`. Default `[SIGTERM, SIGINT]`.
        public var signals: [Int32] = [SIGTERM, SIGINT]
        /// Upper bound on graceful shutdown, measured from its start; when it elapses the group cancels
        /// every service still running. Default 30 seconds.
        public var gracePeriod: Duration = .seconds(30)

        /// Creates a configuration.
        /// - Parameters:
        ///   - signals: see `signals`; default `[SIGTERM, SIGINT]`.
        ///   - gracePeriod: see `gracePeriod`; default 30 seconds.
        public init(signals: [Int32] = [SIGTERM, SIGINT], gracePeriod: Duration = .seconds(30)) {
            self.signals = signals
            self.gracePeriod = gracePeriod
        }
    }
}
