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
