import ServiceCore

/// The registration service's counters (agreed names): `push_registrations_total{bundle_id,operation,outcome}`,
/// `push_auth_failures_total{reason}`, `push_rate_limited_total`. Label values are bounded: bundle
/// ids only once the credential is allowed for them (else `""`), outcomes and reasons from fixed sets.
public struct RegistrationMetrics: Sendable {
    private let registrations: Counter
    private let authFailures: Counter
    private let rateLimited: Counter

    /// Registers the families in `registry` (the process-wide one by default).
    public init(registry: MetricsRegistry = .shared) {
        registrations = registry.counter(
            "push_registrations_total", help: "Registration API calls (items of a batch each count), by bundle id, operation and outcome.",
            labelNames: ["bundle_id", "operation", "outcome"])
        authFailures = registry.counter(
            "push_auth_failures_total", help: "Registration calls refused by authentication or authorization, by reason.",
            labelNames: ["reason"])
        rateLimited = registry.counter("push_rate_limited_total", help: "Registration calls refused by an API key's rate limit.")
    }

    /// Counts one call (or batch item).
    /// - Parameters:
    ///   - bundleID: the bundle id, or `""` when the caller was not allowed to name it.
    ///   - operation: `register`, `unregister`, `admin`.
    ///   - error: nil for success.
    func record(bundleID: String, operation: RegistrationOperation, error: RegistrationError?) {
        let outcome: String
        if let error {
            switch error.code {
            case .invalidArgument: outcome = "invalid_argument"
            case .unauthenticated: outcome = "unauthenticated"
            case .permissionDenied: outcome = "permission_denied"
            case .resourceExhausted: outcome = "rate_limited"
            case .unavailable: outcome = "unavailable"
            default: outcome = "internal"
            }
            if error.code == .resourceExhausted {
                rateLimited.increment()
            } else if error.code == .unauthenticated || error.code == .permissionDenied {
                authFailures.increment(labels: [error.reason ?? "other"])
            }
        } else {
            outcome = "ok"
        }
        // Only calls that passed authorization (succeeded, or failed at Kafka) name their bundle id.
        let bundle = error == nil || error?.code == .unavailable ? bundleID : ""
        registrations.increment(labels: [bundle, operation.rawValue, outcome])
    }
}
