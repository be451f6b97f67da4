/// The one error type of the APNs module.
///
/// `code` says which check failed; `reason` is Apple's reason string when APNs itself would refuse the
/// same request with it (docs/apns-protocol.md §3), so a caller can report exactly what Apple would have.
/// `description` never contains key material or a provider token.
public struct APNsError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is. New codes may be added; switch with a `default`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case invalidDeviceToken
            case invalidRequest
            case payloadDoesNotMatchPushType
            case topicDoesNotMatchPushType
            case invalidSigningKey
            case invalidPublicKey
            case signingFailed
            case malformedProviderToken
            case unsupportedAlgorithm
            case missingKeyID
            case missingIssuer
            case nonIntegerIssuedAt
            case badSignature
            case invalidCertificate
            case invalidPKCS12
            case invalidConfiguration
            case missingCredentials
            case tooManyQueuedRequests
            case deliveryFailed
            case retryHorizonExceeded
            case shutDown
            case unconfirmed
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// A device token that is not 32 to 256 bytes of hex (docs/semantics.md "Device tokens").
        public static let invalidDeviceToken = Code(.invalidDeviceToken)
        /// A request APNs itself would refuse; `reason` holds Apple's reason.
        public static let invalidRequest = Code(.invalidRequest)
        /// The payload contradicts the push type (e.g. a background push with an alert).
        public static let payloadDoesNotMatchPushType = Code(.payloadDoesNotMatchPushType)
        /// The topic lacks the suffix the push type needs, or carries another type's suffix.
        public static let topicDoesNotMatchPushType = Code(.topicDoesNotMatchPushType)
        /// A `.p8` key that cannot be loaded (truncated, not PKCS#8, not EC P-256, encrypted).
        public static let invalidSigningKey = Code(.invalidSigningKey)
        /// A public key that cannot be loaded or is not EC P-256.
        public static let invalidPublicKey = Code(.invalidPublicKey)
        /// OpenSSL failed to produce a signature.
        public static let signingFailed = Code(.signingFailed)
        /// A JWT that is not three base64url parts of JSON objects, or whose signature has the wrong shape.
        public static let malformedProviderToken = Code(.malformedProviderToken)
        /// A JWT whose `alg` is not `ES256`.
        public static let unsupportedAlgorithm = Code(.unsupportedAlgorithm)
        /// A JWT header without a string `kid`.
        public static let missingKeyID = Code(.missingKeyID)
        /// JWT claims without a string `iss`.
        public static let missingIssuer = Code(.missingIssuer)
        /// JWT claims whose `iat` is missing or not an integer number of seconds.
        public static let nonIntegerIssuedAt = Code(.nonIntegerIssuedAt)
        /// A JWT whose signature does not verify against the public key.
        public static let badSignature = Code(.badSignature)
        /// A certificate or its private key that cannot be loaded, or that do not match.
        public static let invalidCertificate = Code(.invalidCertificate)
        /// A PKCS#12 file that cannot be decoded (wrong password, corrupt, unsupported cipher).
        public static let invalidPKCS12 = Code(.invalidPKCS12)
        /// A client setting is unusable (for example an APNs URL that is not `https://host[:port]`).
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// The client has no credentials for the request's bundle ID (and no default credentials).
        public static let missingCredentials = Code(.missingCredentials)
        /// The connection pool's wait queue is full: back-pressure; try again later.
        public static let tooManyQueuedRequests = Code(.tooManyQueuedRequests)
        /// No answer from APNs after the retries the rules allow (connection failures, timeouts);
        /// `cause` holds the last `HTTP2Error`, `attempts` how often the notification was sent.
        public static let deliveryFailed = Code(.deliveryFailed)
        /// Transient failures (5xx answers, lost connections, timed-out streams, an open circuit
        /// breaker) lasted past the notification's retry deadline (`APNsRetryHorizon`); `cause` holds
        /// the last `HTTP2Error` if any, `attempts` how often the notification was sent.
        public static let retryHorizonExceeded = Code(.retryHorizonExceeded)
        /// The client was shut down.
        public static let shutDown = Code(.shutDown)
        /// A request that must not be repeated (a broadcast, a channel create) was sent and no answer
        /// came (timeout, lost connection): Apple may or may not have carried it out, and the client
        /// did not send it again. `attempts` is 1.
        public static let unconfirmed = Code(.unconfirmed)

        /// The code's name, e.g. `invalidDeviceToken`.
        public var description: String { value.rawValue }
    }

    /// Which check failed.
    public let code: Code
    /// A sentence saying exactly what is wrong (never contains secrets).
    public let message: String
    /// Apple's reason for the same refusal, when APNs has one.
    public let reason: APNsReason?
    /// The underlying error, if any.
    public let cause: (any Error & Sendable)?
    /// For `.deliveryFailed`: how many times the notification was sent (attempts that APNs may have
    /// processed; streams it provably refused are not counted). 0 otherwise.
    public let attempts: Int

    /// Creates an error.
    public init(code: Code, message: String, reason: APNsReason? = nil, cause: (any Error & Sendable)? = nil, attempts: Int = 0) {
        self.code = code
        self.message = message
        self.reason = reason
        self.cause = cause
        self.attempts = attempts
    }

    /// A request APNs would refuse with `reason`.
    static func rejected(_ reason: APNsReason, _ message: String) -> APNsError {
        APNsError(code: .invalidRequest, message: message, reason: reason)
    }

    /// Code, Apple's reason, message and cause on one line; never a secret.
    public var description: String {
        var text = "APNsError(\(code)"
        if let reason { text += ", reason: \(reason.rawValue)" }
        text += "): \(message)"
        if let cause { text += " (cause: \(cause))" }
        return text
    }
}
