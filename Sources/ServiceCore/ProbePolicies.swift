/// Decides `/healthz` from the process's heartbeats: the process is alive unless one of its loops
/// (the Kafka poll thread, an HTTP/2 event loop) has not come round for longer than `maxBeatAge`.
/// A pure decision: the caller passes the ages (`Heartbeats.snapshot()`).
public struct LivenessPolicy: Sendable, Equatable {
    /// The longest a loop may go without a beat. Default 30 s.
    public var maxBeatAge: Duration

    /// - Parameter maxBeatAge: see the property.
    public init(maxBeatAge: Duration = .seconds(30)) { self.maxBeatAge = maxBeatAge }

    /// The liveness report for `heartbeats` (name and age of each).
    public func evaluate(_ heartbeats: [(name: String, age: Duration)]) -> ProbeReport {
        if heartbeats.isEmpty { return ProbeReport(checks: [.init("process", .ok, "running (no loop heartbeats registered)")]) }
        return ProbeReport(checks: heartbeats.map { beat in
            beat.age > maxBeatAge
                ? .init("heartbeat \(beat.name)", .failing, "has not come round for \(beat.age.secondsText) (limit \(maxBeatAge.secondsText))")
                : .init("heartbeat \(beat.name)", .ok, "came round \(beat.age.secondsText) ago")
        })
    }
}

/// What `/readyz` decides from: cached observations of the process's Kafka clients and database
/// pool, never a query made for the probe. Absent parts (nil) are not used by this service.
public struct ReadinessInputs: Sendable, Equatable {
    /// An error a Kafka client reported through librdkafka's `error_cb`.
    public struct KafkaErrorObservation: Sendable, Equatable {
        /// librdkafka's error name (`_ALL_BROKERS_DOWN`, `_TRANSPORT`, `_FATAL`, …) and text.
        public var message: String
        /// Time since it was reported.
        public var age: Duration
        /// The client is unusable (`RD_KAFKA_RESP_ERR__FATAL`).
        public var isFatal: Bool
        /// `RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN`.
        public var isAllBrokersDown: Bool

        /// - Parameters: see the properties.
        public init(message: String, age: Duration, isFatal: Bool = false, isAllBrokersDown: Bool = false) {
            self.message = message
            self.age = age
            self.isFatal = isFatal
            self.isAllBrokersDown = isAllBrokersDown
        }
    }

    /// A Kafka client (consumer or producer), as its callbacks last described it.
    public struct KafkaClient: Sendable, Equatable {
        /// Consumer: a rebalance callback handed this member an assignment (possibly empty). Producers: true.
        public var joined: Bool
        /// Consumer: partitions assigned now (zero is still ready: more replicas than partitions).
        public var assignedPartitions: Int
        /// Time since the poll thread last returned from `rd_kafka_consumer_poll` / `rd_kafka_poll`.
        public var lastPollAge: Duration
        /// The last `error_cb` report, if any.
        public var lastError: KafkaErrorObservation?
        /// Brokers in state `UP` in the last statistics (`statistics.interval.ms`); nil before the first.
        public var brokersUp: Int?
        /// Time since the last statistics; nil before the first.
        public var statisticsAge: Duration?

        /// - Parameters: see the properties.
        public init(joined: Bool, assignedPartitions: Int = 0, lastPollAge: Duration, lastError: KafkaErrorObservation? = nil,
                    brokersUp: Int? = nil, statisticsAge: Duration? = nil) {
            self.joined = joined
            self.assignedPartitions = assignedPartitions
            self.lastPollAge = lastPollAge
            self.lastError = lastError
            self.brokersUp = brokersUp
            self.statisticsAge = statisticsAge
        }
    }

    /// The database pool's last periodic check.
    public struct DatabaseCheck: Sendable, Equatable {
        /// Whether it succeeded.
        public var succeeded: Bool
        /// Time since it finished.
        public var age: Duration
        /// The round-trip time, or the error.
        public var detail: String

        /// - Parameters: see the properties.
        public init(succeeded: Bool, age: Duration, detail: String) {
            self.succeeded = succeeded
            self.age = age
            self.detail = detail
        }
    }

    /// The Kafka consumer, when the service consumes.
    public var consumer: KafkaClient?
    /// The Kafka producer, when the service produces.
    public var producer: KafkaClient?
    /// Whether the service uses a database; then `databaseCheck` is its last check (nil: none yet).
    public var usesDatabase: Bool
    /// The database pool's last check.
    public var databaseCheck: DatabaseCheck?
    /// Findings shown in the body that never decide readiness (Apple's reachability, provider-token faults).
    public var informational: [ProbeReport.Check]
    /// The service's phase: only `running` can be ready. Default `running`.
    public var phase: ReadinessState.Phase = .running

    /// - Parameters: see the properties.
    public init(consumer: KafkaClient? = nil, producer: KafkaClient? = nil, usesDatabase: Bool = false,
                databaseCheck: DatabaseCheck? = nil, informational: [ProbeReport.Check] = []) {
        self.consumer = consumer
        self.producer = producer
        self.usesDatabase = usesDatabase
        self.databaseCheck = databaseCheck
        self.informational = informational
    }
}

/// Decides `/readyz`: whether this replica can do its work, from `ReadinessInputs` alone (no I/O).
///
/// Not ready when: the service is starting or stopping; a Kafka client reported a fatal error; the consumer has not joined its group; its
/// poll thread has not returned for `maxPollAge`; the last statistics (younger than
/// `maxStatisticsAge`) show no broker up, or, without such statistics, librdkafka reported all brokers
/// down within `errorWindow`; the database's last check failed, is older than `maxDatabaseCheckAge`,
/// or has not happened yet. Zero assigned partitions is ready. Informational findings (Apple) never
/// make it unready: an outage at Apple must not take every replica out of service.
public struct ReadinessPolicy: Sendable, Equatable {
    /// Default 10 s.
    public var maxPollAge: Duration
    /// Default 30 s.
    public var errorWindow: Duration
    /// Default 30 s.
    public var maxStatisticsAge: Duration
    /// Default 15 s (three checks at the default 5-second interval).
    public var maxDatabaseCheckAge: Duration

    /// - Parameters: see the properties.
    public init(maxPollAge: Duration = .seconds(10), errorWindow: Duration = .seconds(30), maxStatisticsAge: Duration = .seconds(30),
                maxDatabaseCheckAge: Duration = .seconds(15)) {
        self.maxPollAge = maxPollAge
        self.errorWindow = errorWindow
        self.maxStatisticsAge = maxStatisticsAge
        self.maxDatabaseCheckAge = maxDatabaseCheckAge
    }

    /// The readiness report for `inputs`.
    public func evaluate(_ inputs: ReadinessInputs) -> ProbeReport {
        var checks: [ProbeReport.Check] = []
        switch inputs.phase {
        case .running: checks.append(.init("service", .ok, "running"))
        case .starting: checks.append(.init("service", .failing, "starting: dependencies not up yet"))
        case .stopping: checks.append(.init("service", .failing, "stopping: graceful shutdown in progress"))
        }
        if let consumer = inputs.consumer { checks.append(kafka("kafka.consumer", consumer, isConsumer: true)) }
        if let producer = inputs.producer { checks.append(kafka("kafka.producer", producer, isConsumer: false)) }
        if inputs.usesDatabase {
            if let check = inputs.databaseCheck {
                if !check.succeeded {
                    checks.append(.init("postgres", .failing, "last check failed \(check.age.secondsText) ago: \(check.detail)"))
                } else if check.age > maxDatabaseCheckAge {
                    checks.append(.init("postgres", .failing, "last successful check \(check.age.secondsText) ago (limit \(maxDatabaseCheckAge.secondsText))"))
                } else {
                    checks.append(.init("postgres", .ok, "last check \(check.age.secondsText) ago took \(check.detail)"))
                }
            } else {
                checks.append(.init("postgres", .failing, "not checked yet"))
            }
        }
        checks += inputs.informational.map { ProbeReport.Check($0.name, .info, $0.detail) }
        return ProbeReport(checks: checks)
    }

    private func kafka(_ name: String, _ client: ReadinessInputs.KafkaClient, isConsumer: Bool) -> ProbeReport.Check {
        if let error = client.lastError, error.isFatal {
            return .init(name, .failing, "fatal error \(error.age.secondsText) ago: \(error.message)")
        }
        if isConsumer, !client.joined { return .init(name, .failing, "has not joined its consumer group yet") }
        if client.lastPollAge > maxPollAge {
            return .init(name, .failing, "poll thread has not returned for \(client.lastPollAge.secondsText) (limit \(maxPollAge.secondsText))")
        }
        let freshStatistics = client.statisticsAge.map { $0 <= maxStatisticsAge } ?? false
        if freshStatistics, let up = client.brokersUp, up == 0 {
            return .init(name, .failing, "no broker connection up in the statistics of \(client.statisticsAge!.secondsText) ago")
        }
        if !freshStatistics, let error = client.lastError, error.isAllBrokersDown, error.age <= errorWindow {
            return .init(name, .failing, "all brokers down \(error.age.secondsText) ago: \(error.message)")
        }
        var detail = isConsumer ? "joined; \(client.assignedPartitions) partitions assigned; " : ""
        detail += "last poll \(client.lastPollAge.secondsText) ago"
        if let up = client.brokersUp, freshStatistics { detail += "; \(up) brokers up" }
        if let error = client.lastError, error.age <= errorWindow { detail += "; last error \(error.age.secondsText) ago: \(error.message)" }
        return .init(name, .ok, detail)
    }
}

extension Duration {
    /// Seconds with one decimal, e.g. `2.5 s`, for probe bodies and logs.
    public var secondsText: String {
        let tenths = (wholeMilliseconds + 50) / 100
        return "\(tenths / 10).\(abs(tenths % 10)) s"
    }
}
