import PushMessages
import PushDomain

/// A broadcast channel's state in the `channels` table (docs/live-activities.md "The channel's state
/// machine"); the raw values are what the table stores.
public enum ChannelState: String, Sendable, CaseIterable {
    /// The quota let it in; Apple's create has not answered yet (or the process died waiting).
    case creating
    /// Apple created it: `channel_id` is Apple's `apns-channel-id`; broadcasts may use it.
    case active
    /// A delete was asked for (a DELETE command or `delete_at`); Apple has not confirmed it yet.
    case deleting
    /// Deleted at Apple (or never created there). Final: the name cannot be created again.
    case deleted
    /// The create failed (the quota, Apple's refusal, no credential); a later CREATE tries again.
    case failed

    /// Whether the row counts against the app's channel limit (`PUSH_CHANNEL_LIMIT`): `creating`,
    /// `active` and `deleting` may hold a channel at Apple.
    public var countsAgainstLimit: Bool { self == .creating || self == .active || self == .deleting }
}

/// One row of the `channels` table: a channel of an app in one environment, keyed by the caller's
/// name (`ChannelCommand.name`).
public struct ChannelRow: Sendable, Equatable {
    /// The app's bare bundle id.
    public var bundleID: String
    /// `PRODUCTION` or `SANDBOX`.
    public var environment: Environment
    /// The caller's name for the channel.
    public var name: String
    /// Apple's `apns-channel-id` (base64); nil until Apple created it.
    public var channelID: String?
    /// The row's state.
    public var state: ChannelState
    /// Apple's message-storage policy of the channel (never `UNSPECIFIED`).
    public var storagePolicy: MessageStoragePolicy
    /// `ChannelCommand.delete_after_ms` of the create; 0: none.
    public var deleteAfterMs: Int64
    /// When hygiene deletes it (Apple's creation + `delete_after_ms`), ms since the epoch; nil: never.
    public var deleteAtMs: Int64?
    /// When the row was first written, ms since the epoch.
    public var createdAtMs: Int64
    /// When the row last changed state, ms since the epoch.
    public var updatedAtMs: Int64

    /// - Parameters: see the fields.
    public init(bundleID: String, environment: Environment, name: String, channelID: String? = nil, state: ChannelState,
                storagePolicy: MessageStoragePolicy = .noMessageStored, deleteAfterMs: Int64 = 0, deleteAtMs: Int64? = nil,
                createdAtMs: Int64 = 0, updatedAtMs: Int64 = 0) {
        self.bundleID = bundleID
        self.environment = environment
        self.name = name
        self.channelID = channelID
        self.state = state
        self.storagePolicy = storagePolicy
        self.deleteAfterMs = deleteAfterMs
        self.deleteAtMs = deleteAtMs
        self.createdAtMs = createdAtMs
        self.updatedAtMs = updatedAtMs
    }

    /// The row's Kafka key and the key of its `ChannelEvent`s: `<bundle_id>/<environment>/<name>`,
    /// the environment as its enum value name (`com.example.scores/PRODUCTION/match-8812`).
    public var key: String { ChannelCommand.recordKey(bundleID: bundleID, environment: environment, name: name) }
}

extension MessageStoragePolicy {
    /// The policy as the `channels` table stores it and Apple numbers it (`message-storage-policy`:
    /// 0 no message stored, 1 the most recent one); unspecified is 0.
    public var appleValue: Int { self == .mostRecentMessageStored ? 1 : 0 }

    /// The policy of Apple's number (1: most recent message stored; anything else: none).
    public init(appleValue: Int) {
        self = appleValue == 1 ? .mostRecentMessageStored : .noMessageStored
    }
}
