/// Facts about the librdkafka the process runs with (`rd_kafka_version`).
public enum KafkaLibrary {
    /// The librdkafka version text, for example `2.0.2`.
    public static var version: String { RDKafkaVersion.text }

    /// Whether librdkafka is 2.3.0 or later, which no longer aborts when a cooperative-sticky member's
    /// assignor state was never set (librdkafka issue 4312, fixed in 2.3.0).
    public static var hasCooperativeStickyFix: Bool { RDKafkaVersion.number >= 0x0203_0000 }
}

extension KafkaLibrary {
    /// Whether librdkafka accepts `value` for the client property `name` (`rd_kafka_conf_set` on a
    /// scratch configuration): `nil` when it does, else librdkafka's explanation (unknown property,
    /// invalid value, feature not built in).
    public static func checkProperty(_ name: String, _ value: String) -> String? {
        RDKafkaConfig.check(name, value)
    }
}
