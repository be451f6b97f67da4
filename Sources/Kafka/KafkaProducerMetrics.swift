import ServiceCore
import Synchronization

/// The families every service exports about its Kafka producer, read at scrape time from the
/// producer's configuration and its last librdkafka statistics (every `statistics.interval.ms`):
///
/// - `push_kafka_producer_linger_seconds`: the producer's `linger.ms` (`KafkaProducerConfiguration.effectiveLingerMilliseconds`), in seconds.
/// - `push_kafka_produce_rtt_seconds{broker}`: the 99th percentile of the produce request round trip
///   per broker over the last statistics window (librdkafka's `rtt.p99`); absent for a broker that
///   answered nothing in the window.
/// - `push_kafka_producer_wakeups_total{broker}`: wake-ups of the producer's broker thread per broker
///   (librdkafka's `wakeups`).
///
/// The idempotent producer has one request in flight per partition once a batch holds 5 records; a
/// round trip above `linger.ms` then keeps the broker thread polling without sleeping until the
/// answer arrives (docs/capacity.md "Produce round trips"). The alert `PushKafkaProduceSlow` compares
/// the first two families; the third shows the spin itself.
public final class KafkaProducerMetrics: Sendable {
    private let producer = Mutex<KafkaProducer?>(nil)

    /// Registers the three families in `registry` (the first instance registered in a registry is
    /// the one its families read).
    /// - Parameter role: what the producer sends, for the families' help text ("feedback",
    ///   "token-event").
    public init(registry: MetricsRegistry = .shared, role: String) {
        registry.gaugeCallback(
            "push_kafka_producer_linger_seconds",
            help: "linger.ms of the \(role) producer, in seconds: a produce round trip above it makes librdkafka's broker threads spin."
        ) { [weak self] in
            guard let linger = self?.producer.withLock({ $0 })?.configuration.effectiveLingerMilliseconds else { return [] }
            return [MetricSample(value: linger / 1_000)]
        }
        registry.gaugeCallback(
            "push_kafka_produce_rtt_seconds",
            help: "99th percentile of the \(role) producer's request round trip per broker over the last statistics window (librdkafka rtt.p99).",
            labelNames: ["broker"]
        ) { [weak self] in
            let roundTrips = self?.statistics?.roundTripP99Microseconds ?? [:]
            return roundTrips.sorted { $0.key < $1.key }.map { MetricSample(labels: ["\($0.key)"], value: Double($0.value) / 1_000_000) }
        }
        registry.counterCallback(
            "push_kafka_producer_wakeups_total",
            help: "Wake-ups of the \(role) producer's broker thread per broker (librdkafka statistics wakeups): hundreds of thousands per second is the spin of a round trip above linger.ms.",
            labelNames: ["broker"]
        ) { [weak self] in
            let wakeups = self?.statistics?.wakeups ?? [:]
            return wakeups.sorted { $0.key < $1.key }.map { MetricSample(labels: ["\($0.key)"], value: Double($0.value)) }
        }
    }

    /// Sets (or with nil removes) the producer the families describe, while it runs.
    public func setProducer(_ producer: KafkaProducer?) {
        self.producer.withLock { $0 = producer }
    }

    private var statistics: KafkaStatistics? {
        producer.withLock { $0 }?.health.statistics
    }
}
