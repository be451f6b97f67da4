import PushDomain

/// The opt-in try on the other APNs environment after 400 `BadDeviceToken` (docs/semantics.md
/// "The other environment after BadDeviceToken"), as a value without I/O: events in, an action out.
///
/// `BadDeviceToken` for the token's own environment often means a sandbox token was registered as
/// production or the reverse. For an app that opted in, the notification is sent once to the other
/// environment: accepted there, the stored environment is corrected and the notification counts as
/// delivered; refused there, or left without an answer, the token is deactivated exactly as without
/// the opt-in. One value serves one notification and allows one try: every event after it settles
/// with `.deactivate`.
struct OtherEnvironmentTry: Sendable, Hashable {
    /// Which environments the notification's request lets it reach.
    enum RequestScope: Sendable, Hashable {
        /// The request names no environment (neither its notification nor its audience).
        case anyEnvironment
        /// The request names this environment: sending to the other would reach devices it left out
        /// (a sandbox test push to a production user).
        case only(APNsEnvironment)
        /// Not known: a parked notification, whose row does not keep its request's environment.
        case unknown
    }

    /// What the dispatcher knows when the token's environment answered `BadDeviceToken`.
    struct Refusal: Sendable, Hashable {
        /// Where the notification was sent (the token's environment).
        var environment: APNsEnvironment
        /// Whether the notification's app opted in (`PUSH_APNS_OTHER_ENVIRONMENT_RETRY`).
        var optedIn: Bool
        /// Whether the other environment is configured (`OtherEnvironmentRetrySettings.configuredEnvironments`).
        var otherEnvironmentConfigured: Bool
        /// What the request allows.
        var scope: RequestScope
        /// The environment of the token's active row; nil when the table holds no active row for it
        /// (an explicit token never registered, or one deactivated meanwhile). Only consulted when
        /// every other condition holds, so the caller may leave it nil otherwise.
        var storedEnvironment: APNsEnvironment?
    }

    /// The other environment's answer to the one try.
    enum Answer: Sendable, Hashable, CaseIterable {
        /// 200: Apple accepted the notification there.
        case accepted
        /// Any other status (`BadDeviceToken`, a 410, a retryable status that ended the one try, …).
        case refused
        /// No answer from Apple: connection failure, timed-out stream, open circuit, no provider token.
        case noAnswer
    }

    /// What happened.
    enum Event: Sendable, Hashable {
        /// The token's own environment answered 400 `BadDeviceToken`.
        case badDeviceToken(Refusal)
        /// The other environment answered the try.
        case otherEnvironmentAnswered(Answer)
    }

    /// Why the token is deactivated as without the opt-in (the label of log lines and metrics).
    enum Deactivation: String, Sendable, Hashable, CaseIterable {
        case notOptedIn = "not_opted_in"
        case otherEnvironmentNotConfigured = "other_environment_not_configured"
        case requestNamesEnvironment = "request_names_environment"
        case requestUnknown = "request_unknown"
        case tokenNotStored = "token_not_stored"
        case storedInOtherEnvironment = "stored_in_other_environment"
        case refusedThere = "refused"
        case noAnswerThere = "no_answer"
        /// An event that does not fit the state (a second refusal, an answer without a try).
        case alreadySettled = "already_settled"
    }

    /// What to do.
    enum Action: Sendable, Hashable {
        /// Send the notification once to this environment, with no retry.
        case send(to: APNsEnvironment)
        /// Apple accepted it in `to`: report it delivered from `to` and correct the row from `from`
        /// to `to` unless a newer registration changed it.
        case correctEnvironment(from: APNsEnvironment, to: APNsEnvironment)
        /// Deactivate the token and report Apple's `BadDeviceToken`, as without the opt-in.
        case deactivate(Deactivation)
    }

    /// Where the notification stands.
    enum State: Sendable, Hashable {
        /// Nothing decided yet.
        case waiting
        /// The try on `to` is under way.
        case trying(from: APNsEnvironment, to: APNsEnvironment)
        /// Decided; every later event deactivates.
        case settled
    }

    private(set) var state: State = .waiting

    /// Applies `event` and returns what to do.
    mutating func handle(_ event: Event) -> Action {
        switch (state, event) {
        case (.waiting, .badDeviceToken(let refusal)):
            let other = refusal.environment.other
            let blocked: Deactivation? =
                if !refusal.optedIn { .notOptedIn }
                else if !refusal.otherEnvironmentConfigured { .otherEnvironmentNotConfigured }
                else if case .only = refusal.scope { .requestNamesEnvironment }
                else if refusal.scope == .unknown { .requestUnknown }
                else if refusal.storedEnvironment == nil { .tokenNotStored }
                else if refusal.storedEnvironment != refusal.environment { .storedInOtherEnvironment }
                else { nil }
            if let blocked {
                state = .settled
                return .deactivate(blocked)
            }
            state = .trying(from: refusal.environment, to: other)
            return .send(to: other)
        case (.trying(let from, let to), .otherEnvironmentAnswered(let answer)):
            state = .settled
            switch answer {
            case .accepted: return .correctEnvironment(from: from, to: to)
            case .refused: return .deactivate(.refusedThere)
            case .noAnswer: return .deactivate(.noAnswerThere)
            }
        default:
            state = .settled
            return .deactivate(.alreadySettled)
        }
    }
}
