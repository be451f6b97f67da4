extension ServiceGroup {
    /// How a `ServiceGroup.run()` that did not throw ended; `main` picks its exit status from it
    /// (0 for `graceful`).
    public enum Outcome: Sendable, Hashable, CustomStringConvertible {
        /// Every service returned without being cancelled: after graceful shutdown, or on its own.
        case graceful
        /// A second signal (the number given) arrived during graceful shutdown; services were cancelled.
        case escalatedBySignal(Int32)
        /// Graceful shutdown took longer than `Configuration.gracePeriod`; services were cancelled.
        case escalatedAfterGracePeriod
        /// The task running `run()` was cancelled; services were cancelled.
        case cancelled
        /// The service at this index (start order) ended with termination behaviour `cancelGroup`;
        /// the others were cancelled.
        case escalatedByService(index: Int)

        /// Whether every service finished without cancellation.
        public var isGraceful: Bool { self == .graceful }

        /// A short phrase for logs, such as `escalated by signal 15`.
        public var description: String {
            switch self {
            case .graceful: "graceful"
            case .escalatedBySignal(let number): "escalated by signal \(number)"
            case .escalatedAfterGracePeriod: "escalated after the grace period"
            case .cancelled: "cancelled"
            case .escalatedByService(let index): "escalated by service \(index)"
            }
        }
    }
}
