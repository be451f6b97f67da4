import Testing

/// The suites that run whole dispatchers (a consumer, record workers, a PostgreSQL pool, a Kafka
/// producer, often the APNs client and the simulator) run one after the other: they share this
/// process's two cooperative threads and its PostgreSQL server with every other suite, and one of
/// them floods the engine on purpose (10,050 cancels), which made the waits of the others run out
/// when they ran at once (the whole target failed 1 to 3 of them under load).
@Suite(.serialized) enum DispatcherEngineSuites {}
