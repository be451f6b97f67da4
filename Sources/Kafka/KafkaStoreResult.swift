/// The outcome of storing one partition's offset with `KafkaConsumer.storeOffsets`.
public enum KafkaStoreResult: Sendable, CustomStringConvertible {
    /// Stored: librdkafka commits it with the next auto-commit, when the partition is revoked, or in
    /// `close()` (with `OffsetCommit.storedOffsets`).
    case stored
    /// The partition is not assigned to this member (any more): librdkafka refuses to store offsets for
    /// it (`RD_KAFKA_RESP_ERR__STATE`; `_UNKNOWN_PARTITION` when this client never knew the partition).
    /// Its new owner reads from the group's committed offset; the caller drops the offset.
    case notAssigned
    /// Another error, such as `shutdown` after `close()`.
    case failed(KafkaError)

    /// Whether the offset was stored.
    public var isStored: Bool {
        if case .stored = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .stored: "stored"
        case .notAssigned: "notAssigned"
        case .failed(let error): "failed(\(error))"
        }
    }
}
