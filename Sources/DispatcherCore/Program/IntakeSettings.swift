import ServiceCore

/// How the dispatcher guards itself against what arrives on Kafka (README "Security": hostile input on
/// the bus): records the client cannot read, oversized send requests, and tokens claimed by another app.
public struct IntakeSettings: Sendable, Equatable {
    /// Consumer errors at one partition's position (`_BAD_COMPRESSION`, `_BAD_MSG`, `CORRUPT_MESSAGE`,
    /// `MSG_SIZE_TOO_LARGE`) before that offset is skipped and dead-lettered as `undecodable_batch`
    /// (`PUSH_CONSUMER_ERROR_RETRIES`). Default 3.
    public var consumerErrorRetries = 3
    /// A partition whose client reports errors at its position and delivers nothing for this long is
    /// reported stalled (`push_kafka_partition_stalled`, a line in `/readyz`'s body; the service stays
    /// ready) (`PUSH_PARTITION_STALL_MS`). Default 60 s.
    public var partitionStall: Duration = .seconds(60)
    /// Largest send request accepted, in bytes of the record's value as the dispatcher receives it
    /// (after the Kafka client decompressed it) (`PUSH_MAX_SEND_REQUEST_BYTES`). Default 4 MiB.
    public var maxSendRequestBytes = 4 * 1024 * 1024
    /// Most device tokens one send request may list; a larger audience is a campaign
    /// (`PUSH_MAX_TOKENS_PER_REQUEST`). Default 10,000.
    public var maxTokensPerRequest = 10_000
    /// An inactive token row older than this (days since its last change) may move to another app's
    /// bundle id; an active row never does (`PUSH_TOKEN_REBIND_AFTER_DAYS`). Default 30.
    public var tokenRebindAfterDays = 30

    /// The defaults.
    public init() {}

    /// The bounds `SendRequestDecoder` enforces.
    public var sendRequestLimits: SendRequestDecoder.Limits {
        SendRequestDecoder.Limits(maxBytes: maxSendRequestBytes, maxTokens: maxTokensPerRequest)
    }

    /// Reads `PUSH_CONSUMER_ERROR_RETRIES` (1…1,000), `PUSH_PARTITION_STALL_MS` (1 ms … 1 day),
    /// `PUSH_MAX_SEND_REQUEST_BYTES` (1 KiB … 1 GiB), `PUSH_MAX_TOKENS_PER_REQUEST` (1…1,000,000) and
    /// `PUSH_TOKEN_REBIND_AFTER_DAYS` (0…36,500).
    /// - Throws: `EnvironmentConfig.Error` naming the variable that is out of range.
    public static func fromEnvironment(_ env: EnvironmentConfig) throws -> IntakeSettings {
        var settings = IntakeSettings()
        settings.consumerErrorRetries = try env.int("PUSH_CONSUMER_ERROR_RETRIES", default: settings.consumerErrorRetries, in: 1...1_000)
        let stallMs = try env.int("PUSH_PARTITION_STALL_MS", default: Int(settings.partitionStall.wholeMilliseconds), in: 1...86_400_000)
        settings.partitionStall = .milliseconds(stallMs)
        settings.maxSendRequestBytes = try env.int("PUSH_MAX_SEND_REQUEST_BYTES", default: settings.maxSendRequestBytes, in: 1024...1 << 30)
        settings.maxTokensPerRequest = try env.int("PUSH_MAX_TOKENS_PER_REQUEST", default: settings.maxTokensPerRequest, in: 1...1_000_000)
        settings.tokenRebindAfterDays = try env.int("PUSH_TOKEN_REBIND_AFTER_DAYS", default: settings.tokenRebindAfterDays, in: 0...36_500)
        return settings
    }
}
