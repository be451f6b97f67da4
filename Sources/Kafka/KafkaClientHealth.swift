import Foundation
import ServiceCore
import Synchronization

/// What a Kafka client's own callbacks last said about it, read without any I/O: for `/readyz`,
/// `/healthz` and metrics. Never a broker query (librdkafka 2.0.2 ignores the timeout of watermark
/// and metadata queries while brokers are down).
public struct KafkaClientHealth: Sendable {
    /// An error reported by librdkafka's `error_cb`.
    public struct ReportedError: Sendable {
        /// The error.
        public var error: KafkaError
        /// Time since it was reported.
        public var age: Duration
    }

    /// Consumer: a rebalance handed this member an assignment (possibly empty). Producer: always true.
    public var joined: Bool
    /// Consumer: partitions assigned now.
    public var assignedPartitions: Int
    /// Time since the poll thread last returned from its poll call.
    public var lastPollAge: Duration
    /// The last `error_cb` report.
    public var lastError: ReportedError?
    /// The error is one the client does not recover from.
    public var lastErrorIsFatal: Bool
    /// The last statistics (`statistics.interval.ms`), nil before the first.
    public var statistics: KafkaStatistics?
    /// Time since the last statistics.
    public var statisticsAge: Duration?

    /// The observations `ReadinessPolicy` decides from.
    public var readinessInput: ReadinessInputs.KafkaClient {
        ReadinessInputs.KafkaClient(
            joined: joined, assignedPartitions: assignedPartitions, lastPollAge: lastPollAge,
            lastError: lastError.map {
                ReadinessInputs.KafkaErrorObservation(
                    message: "\($0.error.code.name): \($0.error.message)", age: $0.age, isFatal: lastErrorIsFatal,
                    isAllBrokersDown: $0.error.code == .allBrokersDown)
            },
            brokersUp: statistics?.brokersUp, statisticsAge: statisticsAge)
    }
}

/// Collects a client's observations from its callbacks (poll thread, librdkafka threads); read by
/// `KafkaClientHealth` snapshots. Each update is one short lock.
final class KafkaClientMonitor: Sendable {
    private struct State {
        var lastError: (KafkaError, UInt64)?
        var lastErrorIsFatal = false
        var statistics: (KafkaStatistics, UInt64)?
    }

    /// The poll thread's heartbeat (registered with `Heartbeats.shared` while the thread runs).
    let heartbeat: Heartbeat
    private let state = Mutex(State())
    /// Test hook: the poll thread stops returning until this monotonic time (ns).
    let wedgedUntil = Atomic<UInt64>(0)
    /// Consumer: a rebalance handed the member an assignment (possibly empty).
    let joined = Atomic<Bool>(false)

    init(heartbeatName: String) {
        heartbeat = Heartbeats.shared.register(heartbeatName)
    }

    func recordError(_ error: KafkaError, fatal: Bool) {
        state.withLock { $0.lastError = (error, Heartbeat.monotonicNanoseconds()); $0.lastErrorIsFatal = fatal }
    }

    func recordStatistics(_ json: UnsafeRawBufferPointer) {
        guard let statistics = KafkaStatistics(json: json) else { return }
        state.withLock { $0.statistics = (statistics, Heartbeat.monotonicNanoseconds()) }
    }

    /// Poll thread: blocks while a test wedged it.
    func waitWhileWedged() {
        while true {
            let until = wedgedUntil.load(ordering: .relaxed)
            let now = Heartbeat.monotonicNanoseconds()
            guard until > now else { return }
            Thread.sleep(forTimeInterval: min(0.1, Double(until - now) / 1e9))
        }
    }

    func snapshot(joined: Bool, assignedPartitions: Int) -> KafkaClientHealth {
        let now = Heartbeat.monotonicNanoseconds()
        let age = { (time: UInt64) in Duration.nanoseconds(Int64(now > time ? now - time : 0)) }
        return state.withLock { s in
            KafkaClientHealth(
                joined: joined, assignedPartitions: assignedPartitions, lastPollAge: heartbeat.age,
                lastError: s.lastError.map { .init(error: $0.0, age: age($0.1)) }, lastErrorIsFatal: s.lastErrorIsFatal,
                statistics: s.statistics?.0, statisticsAge: s.statistics.map { age($0.1) })
        }
    }
}
