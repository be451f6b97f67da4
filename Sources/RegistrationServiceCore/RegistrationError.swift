/// Why the registration service refused or failed a call; maps one to one onto a gRPC status.
public struct RegistrationError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: Hashable, Sendable { case invalidArgument, unavailable, internalError }
        private let value: Value

        /// The request is malformed; the message names the field (gRPC `INVALID_ARGUMENT`).
        public static let invalidArgument = Code(value: .invalidArgument)
        /// Kafka did not acknowledge the event; the caller may retry (gRPC `UNAVAILABLE`).
        public static let unavailable = Code(value: .unavailable)
        /// A bug (gRPC `INTERNAL`).
        public static let internalError = Code(value: .internalError)

        public var description: String {
            switch value {
            case .invalidArgument: "INVALID_ARGUMENT"
            case .unavailable: "UNAVAILABLE"
            case .internalError: "INTERNAL"
            }
        }
    }

    public let code: Code
    /// What is wrong, starting with the field path for `invalidArgument`: `device.device_token: …`.
    public let message: String
    public let cause: (any Error & Sendable)?

    public init(code: Code, message: String, cause: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    static func invalid(_ field: String, _ problem: String) -> RegistrationError {
        RegistrationError(code: .invalidArgument, message: "\(field): \(problem)")
    }

    public var description: String { "\(code): \(message)" }
}
