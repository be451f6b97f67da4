import ServiceCore

/// Which day partitions of `send_log_v2` to create and which to drop (docs/send-log.md
/// "Partitions"), decided from the partitions there are and the server's clock, without I/O.
public struct SendLogPartitionPlan: Sendable, Equatable {
    /// Days to create, oldest first: today and the `daysAhead` next days that have no partition.
    public var create: [SendLogDay]
    /// Days to drop, oldest first: partitions whose whole day is older than the retention.
    public var drop: [SendLogDay]

    /// The plan for now.
    /// - Parameters:
    ///   - existing: the days that have a partition.
    ///   - nowMs: the server's clock, milliseconds since the Unix epoch.
    ///   - daysAhead: days after today to have partitions for (at least 0).
    ///   - retention: rows are kept at least this long after the end of their `request_day`; nil keeps
    ///     every partition (`PUSH_SEND_LOG_RETENTION_H=0`).
    public init(existing: Set<SendLogDay>, nowMs: Int64, daysAhead: Int, retention: Duration?) {
        let today = SendLogDay(milliseconds: nowMs)
        create = (0...Int64(max(0, daysAhead))).map { SendLogDay(number: today.number + $0) }.filter { !existing.contains($0) }
        if let retention {
            // A day goes once its last millisecond is older than the retention; never today's or later.
            let cutoff = nowMs - retention.wholeMilliseconds
            drop = existing.filter { $0.next.startMilliseconds <= cutoff && $0 < today }.sorted()
        } else {
            drop = []
        }
    }
}
