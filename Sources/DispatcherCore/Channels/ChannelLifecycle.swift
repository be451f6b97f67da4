import PushMessages

/// A broadcast channel's state machine (docs/live-activities.md "The channel's state machine"), as
/// decisions without I/O: given the `channels` row (or none) and what happened, what to write, whether
/// to call Apple's channel-management API, and which `ChannelEvent` to publish. `ChannelCommandHandler`
/// and `ChannelHygieneRunner` carry the decisions out.
///
/// ```
///   (none) ── create ──▶ creating ── Apple 201 ──▶ active ── delete / delete_at ──▶ deleting
///                           │ Apple 4xx, no credential                                  │ Apple 200/204 or
///                           ▼                                                            ▼ ChannelNotRegistered
///                         failed                                                       deleted
/// ```
public enum ChannelLifecycle {
    /// How long a `creating` row (or a `deleting` row without Apple's id) may wait for its Apple
    /// answer before hygiene takes it for a crashed command and recovers it: one minute.
    public static let crashedAfterMs: Int64 = 60_000

    /// What to do with a `ChannelCommand` for the row named by its key.
    public enum CommandStep: Sendable, Equatable {
        /// Check the quota and write the `creating` row in one transaction (a `failed` row is
        /// replaced), then ask Apple to create the channel.
        case reserveAndCreate
        /// Nothing changes: publish this event again (same event id): CREATED for an `active` row,
        /// DELETED for a `deleted` one.
        case republish(ChannelEvent.Kind)
        /// Mark the row `deleting` and ask Apple to delete `channelID`.
        case deleteAtApple(channelID: String)
        /// Mark the row `deleted` without asking Apple (it never had Apple's channel), publish DELETED.
        case markDeleted
        /// Mark the row `deleting` without an Apple id: its create has not answered yet (a crashed
        /// create); hygiene's recovery deletes any channel Apple made for it and publishes DELETED.
        case deleteAfterRecovery
        /// The create of this row has not answered yet (a crashed create, seen again after a
        /// restart): hygiene's recovery creates it and publishes CREATED. Nothing is published now.
        case awaitRecovery
        /// Refused: publish FAILED with this reason and text; the row is unchanged.
        case refuse(OutcomeReason, error: String)
    }

    /// The step for `command` (validated, `ChannelCommandDecoder`) on `row` (nil: no row has the
    /// command's key).
    public static func step(for command: ChannelCommand, row: ChannelRow?) -> CommandStep {
        switch command.action {
        case .create:
            guard let row else { return .reserveAndCreate }
            switch row.state {
            case .failed: return .reserveAndCreate
            case .active: return .republish(.created)
            case .creating: return .awaitRecovery
            case .deleting, .deleted:
                return .refuse(.invalidRequest, error: "name: \"\(row.name)\" names a deleted channel; a deleted channel's name cannot be created again")
            }
        case .delete:
            guard let row else {
                return .refuse(.channelNotRegistered, error: "name: no channel \"\(command.name)\" in this app and environment")
            }
            switch row.state {
            case .active, .deleting:
                if let id = row.channelID { return .deleteAtApple(channelID: id) }
                return .deleteAfterRecovery
            case .creating: return .deleteAfterRecovery
            case .failed: return .markDeleted
            case .deleted: return .republish(.deleted)
            }
        default:
            return .refuse(.invalidRequest, error: "action: is required (CREATE or DELETE)")
        }
    }

    /// Apple's answer to a create or delete request, as the lifecycle needs it.
    public enum AppleAnswer: Sendable, Equatable {
        /// 200/201/204; `channelID` is Apple's `apns-channel-id` of a created channel.
        case success(channelID: String?)
        /// A 4xx or 5xx with Apple's reason string (empty when the body had none).
        case refused(status: Int, reason: String)
        /// No answer within the client's retries, or no request possible: the dispatcher's reason.
        case failed(OutcomeReason, error: String)
    }

    /// What follows Apple's answer: the row's new state and the event to publish.
    public struct Outcome: Sendable, Equatable {
        /// The row's next state.
        public var state: ChannelState
        /// Apple's id to store (a created channel); nil keeps the row's.
        public var channelID: String?
        /// The event's kind; `UNSPECIFIED`: publish nothing.
        public var kind: ChannelEvent.Kind
        /// FAILED: the dispatcher's reason.
        public var outcomeReason: OutcomeReason = .unspecified
        /// FAILED: Apple's reason string.
        public var apnsReason = ""
        /// FAILED: Apple's `:status`, 0 when nothing was answered.
        public var httpStatus = 0
        /// FAILED: what is wrong, for operators.
        public var error = ""
    }

    /// The outcome of Apple's answer to a create request. `CannotCreateChannelConfig` (Apple's own
    /// channel limit; channels can exist outside the platform) is `OUTCOME_REASON_CHANNEL_LIMIT`
    /// like the local quota; any other refusal keeps Apple's reason with `OUTCOME_REASON_UNSPECIFIED`.
    /// No answer at all (a lost connection, a timeout) keeps the row `creating` with kind
    /// `UNSPECIFIED`: nothing is published, the recovery settles it.
    public static func afterCreate(_ answer: AppleAnswer) -> Outcome {
        switch answer {
        case .success(let id?) where !id.isEmpty:
            return Outcome(state: .active, channelID: id, kind: .created)
        case .success:
            return Outcome(state: .failed, kind: .failed, outcomeReason: .connectionError, httpStatus: 201,
                           error: "Apple answered the create without an apns-channel-id header")
        case .refused(let status, let reason):
            let limit = reason == "CannotCreateChannelConfig"
            return Outcome(state: .failed, kind: .failed, outcomeReason: limit ? .channelLimit : .unspecified,
                           apnsReason: reason, httpStatus: status, error: "Apple refused the create: \(status) \(reason)")
        case .failed(.noCredential, let error):
            return Outcome(state: .failed, kind: .failed, outcomeReason: .noCredential, error: error)
        case .failed(let reason, let error):
            // No answer: Apple may have made the channel. The row stays `creating` and nothing is
            // published; hygiene's recovery (after `crashedAfterMs`) deletes an orphan and asks again.
            return Outcome(state: .creating, kind: .unspecified, outcomeReason: reason, error: error)
        }
    }

    /// The outcome of Apple's answer to a delete request. `ChannelNotRegistered` (and `BadChannelId`)
    /// mean Apple no longer has the channel: deleted. Any other refusal or failure leaves the row
    /// `deleting` (hygiene asks again) and publishes FAILED.
    public static func afterDelete(_ answer: AppleAnswer) -> Outcome {
        switch answer {
        case .success:
            return Outcome(state: .deleted, kind: .deleted)
        case .refused(_, let reason) where reason == "ChannelNotRegistered" || reason == "BadChannelId":
            return Outcome(state: .deleted, kind: .deleted)
        case .refused(let status, let reason):
            return Outcome(state: .deleting, kind: .failed, apnsReason: reason, httpStatus: status,
                           error: "Apple refused the delete: \(status) \(reason); hygiene asks again")
        case .failed(let reason, let error):
            return Outcome(state: .deleting, kind: .failed, outcomeReason: reason, error: error + "; hygiene asks again")
        }
    }

    /// What hygiene does with a row at `nowMs` (ms since the epoch).
    public enum HygieneStep: Sendable, Equatable {
        /// Nothing.
        case none
        /// Delete `channelID` at Apple: an `active` row past its `delete_at`, or a `deleting` row whose
        /// delete did not get through.
        case deleteAtApple(channelID: String)
        /// A crashed command (a `creating` row, or a `deleting` row without Apple's id, unanswered for
        /// `crashedAfterMs`): list the app's channels at Apple, delete those no row knows, then create
        /// again (`creating`) or mark deleted (`deleting`).
        case recover
    }

    /// The hygiene step for `row` at `nowMs`.
    public static func hygiene(_ row: ChannelRow, nowMs: Int64) -> HygieneStep {
        let stale = nowMs - row.updatedAtMs >= crashedAfterMs
        switch row.state {
        case .active:
            if let at = row.deleteAtMs, at <= nowMs, let id = row.channelID { return .deleteAtApple(channelID: id) }
            return .none
        case .deleting:
            guard stale else { return .none }
            if let id = row.channelID { return .deleteAtApple(channelID: id) }
            return .recover
        case .creating:
            return stale ? .recover : .none
        case .failed, .deleted:
            return .none
        }
    }

    /// The ids of `atApple` (the app's `all-channels` at Apple) that no row knows: the orphans of
    /// crashed creates, to delete. Nil (the recovery waits for a later pass) when any row of the app
    /// is `creating` and younger than `crashedAfterMs`: its create may be waiting for Apple's answer
    /// right now, and its channel would look like an orphan.
    public static func orphans(atApple: [String], rows: [ChannelRow], nowMs: Int64) -> [String]? {
        if rows.contains(where: { $0.state == .creating && nowMs - $0.updatedAtMs < crashedAfterMs }) { return nil }
        let known = Set(rows.compactMap(\.channelID))
        return atApple.filter { !known.contains($0) }
    }

    /// The `ChannelEvent` of `kind` for `row`, with its derived id (`FeedbackEventID.channelEvent`): the
    /// same fact published again has the same id.
    /// - Parameters:
    ///   - outcome: FAILED's reasons (nil: none).
    ///   - atMs: CREATED: when Apple created it; DELETED: when it was deleted (ms since the epoch).
    public static func event(_ kind: ChannelEvent.Kind, row: ChannelRow, outcome: Outcome? = nil, atMs: Int64) -> ChannelEvent {
        var event = ChannelEvent()
        event.kind = kind
        event.bundleID = row.bundleID
        event.environment = row.environment
        event.name = row.name
        event.messageStoragePolicy = row.storagePolicy
        event.eventID = FeedbackEventID.channelEvent(bundleID: row.bundleID, environment: row.environment, name: row.name, kind: kind)
        switch kind {
        case .created:
            event.channelID = row.channelID ?? ""
            event.atMs = atMs
            event.deleteAtMs = row.deleteAtMs ?? 0
        case .deleted:
            event.channelID = row.channelID ?? ""
            event.atMs = atMs
        default:
            event.channelID = row.channelID ?? ""
            if let outcome {
                event.outcomeReason = outcome.outcomeReason
                event.apnsReason = outcome.apnsReason
                event.httpStatus = UInt32(clamping: outcome.httpStatus)
                event.error = outcome.error
            }
        }
        return event
    }
}
