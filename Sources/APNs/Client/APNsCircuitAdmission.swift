/// The circuit breaker's part in one attempt of `APNsClient.send`, as values (docs/apns-client.md
/// "Circuit breaker"): who may be the half-open trial, and whether a caller that waited for a stream
/// must ask the breaker again before sending. The breaker itself is ``APNsCircuitBreaker``.
public enum APNsCircuitAdmission {
    /// Whether a notification may be the breaker's half-open trial: never one that failed for its
    /// own device token's reason during this send (a 429 `TooManyRequests`, a timed-out stream), and
    /// while the breaker is not closed, never one whose device token has a failure history in the
    /// gate map (``APNsDeviceGates``).
    /// - Parameters:
    ///   - hadTokenFailure: this send already failed for its device token's reason.
    ///   - circuit: the breaker's state now.
    ///   - deviceHasFailureHistory: the gate map remembers failures of this device token (asked only
    ///     when the breaker is not closed).
    public static func mayProbe(
        hadTokenFailure: Bool, circuit: APNsCircuitBreaker.State, deviceHasFailureHistory: @autoclosure () -> Bool
    ) -> Bool {
        !hadTokenFailure && (circuit == .closed || !deviceHasFailureHistory())
    }

    /// Whether a caller admitted before it waited for a stream must ask the breaker again: the breaker
    /// may have opened meanwhile, and then it must not send. The half-open trial never asks again
    /// (it is the one send the breaker lets through).
    public static func mustAskAgain(isTrial: Bool, circuit: APNsCircuitBreaker.State) -> Bool {
        !isTrial && circuit != .closed
    }

    /// What an attempt does with the breaker's answer.
    public enum Step: Sendable, Hashable {
        /// Send; `isTrial`: as the half-open trial.
        case send(isTrial: Bool)
        /// Nothing is sent: wait `wait` (no attempt spent). The device token's gate slot, if held,
        /// is handed on first, so the breaker's wait does not hold the token's other notifications.
        case wait(Duration)
    }

    /// The step for the breaker's `admission`.
    public static func step(_ admission: APNsCircuitBreaker.Admission) -> Step {
        switch admission {
        case .send: .send(isTrial: false)
        case .trial: .send(isTrial: true)
        case .wait(let wait): .wait(wait)
        }
    }
}
