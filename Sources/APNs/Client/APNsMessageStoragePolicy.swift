/// Apple's `message-storage-policy` of a broadcast channel (docs/apns-protocol.md §8, Apple's
/// "Sending channel management requests to APNs"), fixed when the channel is created.
public enum APNsMessageStoragePolicy: Int, Sendable, Hashable, CaseIterable {
    /// 0: Apple stores nothing; a broadcast reaches only devices reachable now, and takes only
    /// `apns-expiration: 0`.
    case noMessageStored = 0
    /// 1: Apple keeps the most recent broadcast for devices that are offline.
    case mostRecentMessageStored = 1
}
