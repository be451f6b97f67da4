import ServiceCore

/// Live Activity broadcast channels in the dispatcher (docs/live-activities.md): the quota and the
/// channel-hygiene job. Read from `PUSH_CHANNEL_LIMIT` and `PUSH_CHANNEL_HYGIENE_INTERVAL_MS`. Every
/// replica should be given the same values.
public struct ChannelSettings: Sendable, Equatable {
    /// Channels one app may have in one environment: `creating`, `active` and `deleting` rows. Default
    /// 10,000, Apple's limit ("Sending channel management requests to APNs").
    public var limit = 10_000
    /// The pause between the end of one channel-hygiene pass (by any replica) and the next: how late a
    /// channel past its `delete_after_ms` may be deleted, and how often crashed commands are looked for.
    /// Default 60 s.
    public var hygieneInterval: Duration = .seconds(60)
    /// Rows one hygiene pass looks at, at most. Default 1,000.
    public var hygieneBatchSize = 1_000

    /// The defaults.
    public init() {}

    /// Reads `PUSH_CHANNEL_LIMIT` (1 to 1,000,000) and `PUSH_CHANNEL_HYGIENE_INTERVAL_MS` (positive).
    /// - Throws: what `env` throws for a bad value.
    public static func fromEnvironment(_ env: EnvironmentConfig) throws -> ChannelSettings {
        var settings = ChannelSettings()
        settings.limit = try env.int("PUSH_CHANNEL_LIMIT", default: settings.limit, in: 1...1_000_000)
        settings.hygieneInterval = try env.milliseconds("PUSH_CHANNEL_HYGIENE_INTERVAL_MS", default: settings.hygieneInterval)
        if settings.hygieneInterval <= .zero { try env.fail("PUSH_CHANNEL_HYGIENE_INTERVAL_MS", "must be positive") }
        return settings
    }
}
