import Kafka

/// The records of one partition that the dispatcher took and has not yet passed in its committed
/// position, and the offset that may be stored: one past the longest prefix of finished records.
///
/// Records are started in increasing offset order (Kafka delivers a partition in order; offsets may
/// have gaps, e.g. transaction markers or compacted records) and may finish in any order. An offset is
/// never stored past a record that did not finish (docs/dispatcher-engine.md).
public struct OffsetTracker: Sendable, Equatable {
    /// Started records still in the uncommitted span, oldest first, with whether each finished.
    private var span: [(offset: Int64, finished: Bool)] = []
    /// Index of the first entry of `span` still held (entries before it were committed).
    private var head = 0
    /// The next offset to read after the longest finished prefix, or nil before any record finished.
    public private(set) var committable: KafkaOffset?
    /// The highest offset started so far.
    private var highestStarted: Int64?

    public init() {}

    /// Records taken and not yet part of the finished prefix.
    public var uncommitted: Int { span.count - head }

    /// The oldest record not yet finished, if any.
    public var oldestUnfinished: KafkaOffset? {
        head < span.count ? KafkaOffset(rawValue: span[head].offset) : nil
    }

    /// Marks `offset` as taken. Offsets must be started in increasing order.
    /// - Returns: false (and changes nothing) when `offset` is not above every offset started so far.
    @discardableResult
    public mutating func start(_ offset: KafkaOffset) -> Bool {
        guard accepts(offset) else { return false }
        span.append((offset.rawValue, false))
        highestStarted = offset.rawValue
        return true
    }

    /// Whether `offset` is above every offset started so far (an older one means the partition is
    /// being read again from an earlier position).
    public func accepts(_ offset: KafkaOffset) -> Bool {
        if let highestStarted, offset.rawValue <= highestStarted { return false }
        if let committable, offset.rawValue < committable.rawValue { return false }
        return true
    }

    /// Marks a started record finished.
    /// - Returns: the new committable offset when the finished prefix grew, nil otherwise (also when
    ///   `offset` was never started or already finished).
    @discardableResult
    public mutating func finish(_ offset: KafkaOffset) -> KafkaOffset? {
        guard let index = find(offset.rawValue), !span[index].finished else { return nil }
        span[index].finished = true
        guard index == head else { return nil }
        while head < span.count, span[head].finished {
            committable = KafkaOffset(rawValue: span[head].offset + 1)
            head += 1
        }
        if head == span.count {
            span.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 1024, head * 2 >= span.count {
            span.removeFirst(head)
            head = 0
        }
        return committable
    }

    /// Forgets every record that did not finish (their partition was revoked, or the process is
    /// stopping): they stay uncommitted and are read again by the next owner.
    public mutating func abandonUnfinished() {
        span.removeAll()
        head = 0
    }

    private func find(_ offset: Int64) -> Int? {
        var low = head, high = span.count - 1
        while low <= high {
            let middle = (low + high) / 2
            let value = span[middle].offset
            if value == offset { return middle }
            if value < offset { low = middle + 1 } else { high = middle - 1 }
        }
        return nil
    }

    public static func == (lhs: OffsetTracker, rhs: OffsetTracker) -> Bool {
        lhs.committable == rhs.committable && lhs.highestStarted == rhs.highestStarted && lhs.span[lhs.head...].elementsEqual(rhs.span[rhs.head...]) { $0 == $1 }
    }
}
