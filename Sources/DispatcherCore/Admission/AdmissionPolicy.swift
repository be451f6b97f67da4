import PushMessages

/// One notification about to start, as the admission policies see it.
struct AdmissionCandidate: Sendable {
    /// The request the notification belongs to.
    var requestID: String
    /// The app (the `apns-topic`'s bundle id).
    var bundleID: String
    /// Whether it would go to Apple (false: its outcome is known without sending).
    var sends: Bool
}

/// A policy's answer for one candidate.
enum AdmissionVerdict: Sendable, Equatable {
    /// Go on with the next policy (after the last one: start the notification).
    case admit
    /// Start the notification, but settle it with this outcome instead of sending it (recorded and
    /// reported like any outcome).
    case settle(DeliveryOutcome, OutcomeReason)
}

/// One admission rule of the delivery pipeline (docs/dispatcher-engine.md "Admission"). A policy is a
/// small value; the pipeline asks its `AdmissionChain` in order before every notification starts, so a
/// new rule is a new type in the chain, not an edit of the pipeline.
protocol AdmissionPolicy: Sendable {
    /// Decides for `candidate`; may wait (a budget, a token bucket) and may take `permit`.
    /// - Throws: `CancellationError` while waiting.
    func admit(_ candidate: AdmissionCandidate, permit: NotificationPermit) async throws -> AdmissionVerdict

    /// Whether the policy is asked once more just before the send (a decision that can change while
    /// the notification waited to start, such as a cancel). Such a policy must not wait.
    var rechecksBeforeSend: Bool { get }

    /// The answer of a policy that `rechecksBeforeSend`, without waiting.
    func recheck(_ candidate: AdmissionCandidate) -> AdmissionVerdict

    /// Told once the chain is done with `candidate` (admitted, settled, or a later policy threw),
    /// for every policy whose `admit` returned: a policy that counts candidates in admission
    /// (`ClassPriorityPolicy`) stops counting it here.
    func admissionEnded(_ candidate: AdmissionCandidate)
}

extension AdmissionPolicy {
    var rechecksBeforeSend: Bool { false }
    func recheck(_ candidate: AdmissionCandidate) -> AdmissionVerdict { .admit }
    func admissionEnded(_ candidate: AdmissionCandidate) {}
}

/// The ordered admission policies of one source (a request, a campaign page, a parked re-drive).
struct AdmissionChain: Sendable {
    let policies: [any AdmissionPolicy]

    init(_ policies: [any AdmissionPolicy]) { self.policies = policies }

    /// Asks every policy in order. A `.settle` verdict turns the candidate into one that does not
    /// send; later policies still see it (a budget bounds settlements too). The first settlement wins.
    /// Every policy whose `admit` returned is told `admissionEnded` before this returns or throws.
    /// - Throws: `CancellationError` while a policy waits (permits taken so far stay with `permit`).
    func admit(_ candidate: AdmissionCandidate, permit: NotificationPermit) async throws -> AdmissionVerdict {
        var candidate = candidate
        var verdict = AdmissionVerdict.admit
        var asked = 0
        defer { for policy in policies.prefix(asked) { policy.admissionEnded(candidate) } }
        for policy in policies {
            let answer = try await policy.admit(candidate, permit: permit)
            asked += 1
            if case .settle = answer, verdict == .admit {
                verdict = answer
                candidate.sends = false
            }
        }
        return verdict
    }

    /// The last word before the send: the policies that recheck, in order.
    func recheck(_ candidate: AdmissionCandidate) -> AdmissionVerdict {
        for policy in policies where policy.rechecksBeforeSend {
            let answer = policy.recheck(candidate)
            if answer != .admit { return answer }
        }
        return .admit
    }
}
