import Postgres
import ServiceCore

/// Keeps `send_log_v2`'s day partitions (docs/send-log.md "Partitions"): creates today's and the
/// next `daysAhead` days' before rows arrive, and drops the days older than the retention, which is
/// the whole of `send_log_v2`'s retention (the old `send_log` and the `DEFAULT` partition are
/// `SendLogRetention`'s).
///
/// Every pass runs in one transaction under `pg_advisory_xact_lock(lockKey)`, so replicas that start
/// or run the pass at once create and drop each day once. `lock_timeout` bounds how long it waits
/// for the table locks (`ATTACH PARTITION` takes `SHARE UPDATE EXCLUSIVE` on `send_log_v2`, which
/// writes do not conflict with; dropping a day takes `ACCESS EXCLUSIVE` for an instant): a pass that
/// times out fails and the next one tries again, while writes of a missing day go to the `DEFAULT`
/// partition.
///
/// A `Service` of the dispatcher's sources: a pass every `interval` whether or not a retention is
/// set; `TokenStore.migrate()` runs one pass (without drops) at start-up.
public struct SendLogPartitions: Service {
    /// The advisory lock key: the ASCII bytes of "sendlogp" as a big-endian Int64.
    public static let lockKey: Int64 = 0x7365_6E64_6C6F_6770

    /// Rows are kept at least this long after the end of their `request_day`; nil: no day is dropped.
    public let retention: Duration?
    /// Days after today (UTC) that get their partition ahead (default 3).
    public let daysAhead: Int
    /// The pause between passes of `run(shutdown:)`.
    public let interval: Duration

    private let pool: PostgresPool
    private let logger: Logger

    /// - Parameters:
    ///   - pool: the dispatcher's database (schema of `TokenStoreMigrations`, migration 14 applied).
    ///   - retention: see `retention` (the dispatcher's `PUSH_SEND_LOG_RETENTION_H`).
    ///   - daysAhead: see `daysAhead` (at least 0).
    ///   - interval: the pause between passes (default 10 minutes).
    ///   - logger: reports the days created and dropped, and failed passes.
    public init(pool: PostgresPool, retention: Duration?, daysAhead: Int = 3, interval: Duration = .seconds(600),
                logger: Logger = Logger(label: "dispatcher.send-log-partitions")) {
        self.pool = pool
        self.retention = retention
        self.daysAhead = max(0, daysAhead)
        self.interval = interval
        self.logger = logger
    }

    /// One pass: creates the missing days from today to `daysAhead` days ahead (moving any row of
    /// such a day out of the `DEFAULT` partition) and drops the expired days, in one transaction.
    /// - Returns: what the pass did (days already there or gone are left out).
    /// - Throws: `PostgresError` (SQLSTATE 55P03 when a table lock was not granted within the
    ///   `lock_timeout`, 5 s); nothing of the pass is applied then.
    @discardableResult
    public func ensure() async throws -> SendLogPartitionPlan {
        let plan = try await pool.withTransaction { connection in
            _ = try await connection.query("SET LOCAL lock_timeout = '5s'")
            _ = try await connection.query("SELECT pg_advisory_xact_lock($1)", [.int64(Self.lockKey)])
            let nowMs = try await connection.query("SELECT (extract(epoch FROM now()) * 1000)::bigint AS now_ms")
                .first?.int64("now_ms") ?? 0
            let names = try await connection.query("""
                SELECT c.relname::text AS name FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
                 WHERE i.inhparent = 'send_log_v2'::regclass
                """)
            let existing = Set(try names.compactMap { try $0.string("name").flatMap(SendLogDay.init(partitionName:)) })
            let plan = SendLogPartitionPlan(existing: existing, nowMs: nowMs, daysAhead: daysAhead, retention: retention)
            for day in plan.create { try await Self.create(day, on: connection) }
            for day in plan.drop { _ = try await connection.execute("DROP TABLE \(day.partitionName)") }
            return plan
        }
        if !plan.create.isEmpty || !plan.drop.isEmpty {
            logger.info("send_log_v2 partitions", [
                "created": plan.create.map(\.description).joined(separator: ","),
                "dropped": plan.drop.map(\.description).joined(separator: ","),
            ])
        }
        return plan
    }

    /// Creates `day`'s partition as a table of its own, moves the day's rows out of the `DEFAULT`
    /// partition into it, and attaches it (PostgreSQL 15 docs, §5.11.2.2 "Partition Maintenance").
    static func create(_ day: SendLogDay, on connection: PostgresConnection) async throws {
        let name = day.partitionName
        _ = try await connection.execute("CREATE TABLE \(name) (LIKE send_log_v2 INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        _ = try await connection.execute("""
            WITH moved AS (DELETE FROM send_log_v2_default WHERE request_day = '\(day)'::date RETURNING *)
            INSERT INTO \(name) SELECT * FROM moved
            """)
        _ = try await connection.execute(
            "ALTER TABLE send_log_v2 ATTACH PARTITION \(name) FOR VALUES FROM ('\(day)') TO ('\(day.next)')")
    }

    /// Runs `ensure()` now and then every `interval` until `shutdown` triggers or the task is
    /// cancelled; a failed pass is logged and tried again at the next interval.
    public func run(shutdown: GracefulShutdown) async {
        while !shutdown.isTriggered, !Task.isCancelled {
            do {
                try await ensure()
            } catch {
                if Task.isCancelled { return }
                logger.warning("keeping send_log_v2 partitions failed", ["error": "\(error)"])
            }
            do { try await shutdown.sleep(for: interval) } catch { return }
        }
    }
}
