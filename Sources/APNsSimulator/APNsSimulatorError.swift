/// The one error type of the APNsSimulator module: a malformed configuration (file, environment
/// entry, admin request body) or a listener that cannot start.
public struct APNsSimulatorError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is. New codes may be added; match on the statics.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case invalidConfiguration, invalidKey, startFailed
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// A configuration value (faults JSON, `PUSH_SIM_KEYS` entry, admin body) is malformed.
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// A trusted provider-token key cannot be read or is not an EC P-256 public key.
        public static let invalidKey = Code(.invalidKey)
        /// A listener could not be started (port in use, TLS files unreadable).
        public static let startFailed = Code(.startFailed)

        public var description: String { value.rawValue }
    }

    /// The kind of failure.
    public let code: Code
    /// What is wrong, naming the field, file or entry.
    public let message: String
    /// The underlying error, if any.
    public let cause: (any Error & Sendable)?

    /// Creates an error.
    public init(_ code: Code, _ message: String, cause: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    public var description: String {
        "APNsSimulatorError.\(code): \(message)" + (cause.map { " (\($0))" } ?? "")
    }
}
