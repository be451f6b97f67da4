/// The records a `KafkaConsumer` reads, in partition order, as an `AsyncSequence`.
///
/// Buffering: the poll thread appends to a buffer of at most `maxBufferedMessages` records and stops
/// taking records from librdkafka while it is full (librdkafka's own prefetch queue is bounded by
/// `queued.min.messages` = `maxBufferedMessages` and `queued.max.messages.kbytes`). When the reader
/// leaves the buffer full for more than 0.5 s, the assigned partitions are paused
/// (`rd_kafka_pause_partitions`, which also drops librdkafka's prefetched records; fetching resumes
/// at the next undelivered offset) and polling continues so that rebalances are still served; they
/// resume once the buffer drained to half, except those the application paused with
/// `KafkaConsumer.pause`. Memory stays bounded however slowly records are read. Records of revoked
/// partitions are dropped from the buffer; records of partitions the application paused are not.
///
/// Iterate from one task at a time. The sequence ends when the consumer is closed, and `next()`
/// returns `nil` when the iterating task is cancelled.
public struct KafkaMessageSequence: AsyncSequence, Sendable {
    public typealias Element = KafkaMessage
    public typealias Failure = Never

    let core: ConsumerCore

    public struct AsyncIterator: AsyncIteratorProtocol {
        let core: ConsumerCore

        public mutating func next() async -> KafkaMessage? {
            await core.nextMessage()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(core: core) }
}

/// The rebalance and error events of a `KafkaConsumer`, as an `AsyncSequence`.
///
/// Buffering: unbounded for rebalances (rare); at most 1,000 events are kept, the oldest errors are
/// dropped first. While an iterator of this sequence exists, revocations wait for
/// `KafkaRevocation.finish()` (up to `revocationTimeout`). Iterate from one task at a time; the
/// sequence ends when the consumer is closed.
public struct KafkaConsumerEventSequence: AsyncSequence, Sendable {
    public typealias Element = KafkaConsumerEvent
    public typealias Failure = Never

    let core: ConsumerCore

    public struct AsyncIterator: AsyncIteratorProtocol {
        let observer: EventObserver

        public mutating func next() async -> KafkaConsumerEvent? {
            await observer.core.nextEvent()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(observer: EventObserver(core: core)) }
}

/// Counts live event iterators: revocations wait for the application only while one exists.
final class EventObserver: Sendable {
    let core: ConsumerCore

    init(core: ConsumerCore) {
        self.core = core
        core.observerCountChanged(by: 1)
    }

    deinit { core.observerCountChanged(by: -1) }
}
