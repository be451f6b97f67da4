import APNs

/// Why one of the dispatcher's retry waiters ended a send inside the APNs client instead of letting
/// it wait.
enum SendInterruption: Sendable, Equatable {
    /// Parked in `pending_retries` (durably), or put back there by a re-drive: no outcome yet.
    case parked(reason: String)
    /// The one try on the other environment ended at its first wait, without Apple's final answer.
    /// `attempts`: sends APNs may have processed.
    case noFinalAnswer(attempts: Int, reason: String)
}

/// The one error the dispatcher's retry waiters throw. `APNsRetryWaiter.wait` can stop a send only
/// by throwing (the client rethrows the error unchanged), so this crosses the APNs client and
/// nothing else: `SendRequestProcessor.send` turns it back into a value (`SendAnswer.interrupted`)
/// at its one call of `NotificationSender.send`.
struct WaiterEndedSend: Error, CustomStringConvertible {
    let interruption: SendInterruption
    init(_ interruption: SendInterruption) { self.interruption = interruption }
    var description: String {
        switch interruption {
        case .parked(let reason): "notification parked in pending_retries (\(reason))"
        case .noFinalAnswer(_, let reason): "the one try ended without a final answer (\(reason))"
        }
    }
}

/// What one call of the APNs client answered: Apple's final answer, or a waiter's interruption.
enum SendAnswer: Sendable {
    case answered(APNsResponse)
    case interrupted(SendInterruption)
    /// No credential may send it (`CredentialsStore.Choice.refused`): nothing was sent.
    case noCredential(String)
}
