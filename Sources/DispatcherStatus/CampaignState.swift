import PushMessages

/// Where a campaign row stands (`campaigns.status`, docs/campaigns.md "States"); the names are the
/// contract's `RequestStatus` values in lowercase.
public enum CampaignState: String, Sendable, CaseIterable {
    /// Due now, not started.
    case accepted
    /// Waiting for `send_at_ms`.
    case scheduled
    /// A runner holds (or held) its lease and sends.
    case running
    /// Every token of the audience reached a final outcome; `RequestCompleted` published.
    case completed
    /// A cancel stopped it; the rest was settled `SKIPPED`; `RequestCompleted` published.
    case cancelled

    /// The state a new row starts in: scheduled when `sendAtMs` is after `nowMs`.
    public static func initial(sendAtMs: Int64, nowMs: Int64) -> CampaignState {
        sendAtMs > nowMs ? .scheduled : .accepted
    }

    /// Whether a runner may still take it.
    public var isOpen: Bool { self == .accepted || self == .scheduled || self == .running }

    /// The state after a runner took the lease; nil when the row is closed.
    public var afterLeaseTaken: CampaignState? { isOpen ? .running : nil }

    /// The final state when the runner reaches the end of the audience.
    /// - Parameter cancelRequested: whether a cancel was recorded before the end.
    public static func final(cancelRequested: Bool) -> CampaignState { cancelRequested ? .cancelled : .completed }

    /// Whether `next` may follow `self`.
    public func allows(_ next: CampaignState) -> Bool {
        switch (self, next) {
        case (.scheduled, .running), (.accepted, .running), (.running, .running),
             (.running, .completed), (.running, .cancelled): true
        default: false
        }
    }

    /// The contract's value.
    public var requestStatus: RequestStatus {
        switch self {
        case .accepted: .accepted
        case .scheduled: .scheduled
        case .running: .running
        case .completed: .completed
        case .cancelled: .cancelled
        }
    }
}
