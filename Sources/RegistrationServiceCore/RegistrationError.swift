/// Why the registration service refused or failed a call; maps one to one onto a gRPC status.
public struct RegistrationError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: Hashable, Sendable {
            case invalidArgument, unavailable, internalError, unauthenticated, permissionDenied, resourceExhausted
        }
        private let value: Value

        /// The request is malformed; the message names the field (gRPC `INVALID_ARGUMENT`).
        public static let invalidArgument = Code(value: .invalidArgument)
        /// Kafka did not acknowledge the event; the caller may retry (gRPC `UNAVAILABLE`).
        public static let unavailable = Code(value: .unavailable)
        /// A bug (gRPC `INTERNAL`).
        public static let internalError = Code(value: .internalError)
        /// No credential, or one that is not valid (gRPC `UNAUTHENTICATED`, HTTP 401).
        public static let unauthenticated = Code(value: .unauthenticated)
        /// A valid credential used for another bundle id, operation or user (gRPC
        /// `PERMISSION_DENIED`, HTTP 403).
        public static let permissionDenied = Code(value: .permissionDenied)
        /// The credential's rate limit is spent; `retryAfter` says when to retry (gRPC
        /// `RESOURCE_EXHAUSTED`, HTTP 429).
        public static let resourceExhausted = Code(value: .resourceExhausted)

        public var description: String {
            switch value {
            case .invalidArgument: "INVALID_ARGUMENT"
            case .unavailable: "UNAVAILABLE"
            case .internalError: "INTERNAL"
            case .unauthenticated: "UNAUTHENTICATED"
            case .permissionDenied: "PERMISSION_DENIED"
            case .resourceExhausted: "RESOURCE_EXHAUSTED"
            }
        }
    }

    public let code: Code
    /// What is wrong, starting with the field path for `invalidArgument`: `device.device_token: …`.
    /// Never contains a credential.
    public let message: String
    public let cause: (any Error & Sendable)?
    /// For `resourceExhausted`: how long until the call may succeed.
    public let retryAfter: Duration?
    /// For authentication and permission failures: a short, bounded reason for the
    /// `push_auth_failures_total{reason}` metric (`missing`, `unknown_key`, `jwt_expired`, …).
    public let reason: String?

    public init(code: Code, message: String, cause: (any Error & Sendable)? = nil, retryAfter: Duration? = nil, reason: String? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
        self.retryAfter = retryAfter
        self.reason = reason
    }

    static func invalid(_ field: String, _ problem: String) -> RegistrationError {
        RegistrationError(code: .invalidArgument, message: "\(field): \(problem)")
    }

    static func unauthenticated(_ reason: String, _ message: String) -> RegistrationError {
        RegistrationError(code: .unauthenticated, message: message, reason: reason)
    }

    static func denied(_ reason: String, _ message: String) -> RegistrationError {
        RegistrationError(code: .permissionDenied, message: message, reason: reason)
    }

    public var description: String { "\(code): \(message)" }
}
