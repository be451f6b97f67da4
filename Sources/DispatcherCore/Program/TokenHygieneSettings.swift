/// What the token-hygiene job does and how often (docs/token-hygiene.md). The dispatcher reads it from
/// `PUSH_TOKEN_STALE_AFTER_DAYS`, `PUSH_TOKEN_DELETE_INACTIVE_AFTER_DAYS`, `PUSH_CAMPAIGN_RETENTION_DAYS`,
/// `PUSH_TOKEN_HYGIENE_INTERVAL_MS` and `PUSH_TOKEN_HYGIENE_BATCH_SIZE`. Every replica should be
/// given the same values: whichever holds the job's lease applies its own.
public struct TokenHygieneSettings: Sendable, Equatable {
    /// Active tokens whose last registration is older than this many days are deactivated as stale,
    /// with a `TokenInvalidated` (`OUTCOME_REASON_TOKEN_STALE`). nil (the default): never. 90 is
    /// the recommended value.
    public var staleAfterDays: Int?
    /// Inactive rows that became inactive more than this many days ago are deleted. nil (the default):
    /// never. Keep it above the token-events topic's retention: a deleted row no longer stops an
    /// older, redelivered registration from re-creating the token.
    public var deleteInactiveAfterDays: Int?
    /// Finished campaign rows (`completed`, `cancelled`) older than this many days are deleted.
    /// Default 30; nil: kept forever. Keep it above the send-requests topic's retention: a campaign
    /// record redelivered after its row is gone would run again.
    public var campaignRetentionDays: Int? = 30
    /// The pause between the end of one complete pass (by any replica) and the next. Default 1 h.
    public var interval: Duration = .seconds(3600)
    /// Rows per statement: a page of `batchSize` tokens in key order, or `batchSize` campaign rows.
    /// Default 1,000.
    public var batchSize = 1_000

    /// The defaults: stale ageing and inactive deletion off, campaigns kept 30 days.
    public init() {}

    /// Whether any part of the job is on (else the dispatcher does not run it).
    public var isEnabled: Bool { staleAfterDays != nil || deleteInactiveAfterDays != nil || campaignRetentionDays != nil }

    /// The cutoffs of a pass that starts at `nowMs` (ms since the epoch).
    public func cutoffs(nowMs: Int64) -> TokenHygieneCutoffs {
        let day: Int64 = 86_400_000
        return TokenHygieneCutoffs(
            staleBeforeMs: staleAfterDays.map { nowMs - Int64($0) * day },
            deleteInactiveBeforeMs: deleteInactiveAfterDays.map { nowMs - Int64($0) * day },
            deleteCampaignsBeforeMs: campaignRetentionDays.map { nowMs - Int64($0) * day })
    }
}

/// The time limits of one pass, ms since the epoch; nil turns that part off. Every comparison is
/// strict: a row exactly at a cutoff stays. `TokenHygieneStore` applies them in SQL; the methods here
/// say the same in Swift.
public struct TokenHygieneCutoffs: Sendable, Equatable {
    /// Active tokens last registered before this are stale.
    public var staleBeforeMs: Int64?
    /// Inactive rows that became inactive before this are deleted.
    public var deleteInactiveBeforeMs: Int64?
    /// Finished campaigns completed before this are deleted.
    public var deleteCampaignsBeforeMs: Int64?

    /// - Parameters: see the properties.
    public init(staleBeforeMs: Int64? = nil, deleteInactiveBeforeMs: Int64? = nil, deleteCampaignsBeforeMs: Int64? = nil) {
        self.staleBeforeMs = staleBeforeMs
        self.deleteInactiveBeforeMs = deleteInactiveBeforeMs
        self.deleteCampaignsBeforeMs = deleteCampaignsBeforeMs
    }

    /// Whether the pass walks `device_tokens` at all.
    public var touchesTokens: Bool { staleBeforeMs != nil || deleteInactiveBeforeMs != nil }

    /// Whether an active token last registered at `registeredAtMs` is deactivated as stale.
    public func isStale(registeredAtMs: Int64) -> Bool {
        staleBeforeMs.map { registeredAtMs < $0 } ?? false
    }

    /// Whether an inactive row that became inactive at `inactiveAtMs` is deleted.
    public func isExpiredInactive(inactiveAtMs: Int64) -> Bool {
        deleteInactiveBeforeMs.map { inactiveAtMs < $0 } ?? false
    }

    /// Whether a finished campaign completed at `completedAtMs` is deleted.
    public func isExpiredCampaign(completedAtMs: Int64) -> Bool {
        deleteCampaignsBeforeMs.map { completedAtMs < $0 } ?? false
    }
}
