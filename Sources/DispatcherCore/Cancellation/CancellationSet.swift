/// The request ids with a recorded `CancelRequest`, each kept until its cancel is older than a
/// cut-off (docs/campaigns.md "Cancellation"): bounded by time, never by count, so no number of
/// other cancels can push a cancel out. No I/O; `CampaignCancellations` shares one per process.
///
/// Each id keeps the latest time it was recorded at (milliseconds since the epoch); `expire(before:)`
/// drops the ids whose time is earlier than the cut-off. Inserting an id again with the same or an
/// earlier time changes nothing, so a poll that reads a row again costs no memory.
public struct CancellationSet: Sendable {
    /// The latest recorded time of each id, in ms since the epoch.
    private var recordedAtMs: [String: Int64] = [:]
    /// (time, id) pairs, a binary min-heap on the time; an id may appear more than once (a later
    /// time pushed again), the stale pairs are dropped when they reach the top.
    private var byTime: [(atMs: Int64, requestID: String)] = []

    /// An empty set.
    public init() {}

    /// The number of ids held.
    public var count: Int { recordedAtMs.count }

    /// Whether a cancel for `requestID` is held.
    public func contains(_ requestID: String) -> Bool { recordedAtMs[requestID] != nil }

    /// Holds `requestID`, recorded at `atMs` (ms since the epoch).
    /// - Returns: whether the id is new to the set.
    @discardableResult
    public mutating func insert(_ requestID: String, atMs: Int64) -> Bool {
        let earlier = recordedAtMs[requestID]
        if let earlier, earlier >= atMs { return false }
        recordedAtMs[requestID] = atMs
        push((atMs, requestID))
        return earlier == nil
    }

    /// Drops every id whose latest recorded time is earlier than `cutoffMs` (ms since the epoch).
    /// - Returns: the number of ids dropped.
    @discardableResult
    public mutating func expire(before cutoffMs: Int64) -> Int {
        var dropped = 0
        while let top = byTime.first, top.atMs < cutoffMs {
            popTop()
            if let latest = recordedAtMs[top.requestID], latest < cutoffMs {
                recordedAtMs[top.requestID] = nil
                dropped += 1
            }
        }
        return dropped
    }

    // MARK: Heap

    private mutating func push(_ element: (atMs: Int64, requestID: String)) {
        byTime.append(element)
        var child = byTime.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard byTime[child].atMs < byTime[parent].atMs else { break }
            byTime.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func popTop() {
        byTime.swapAt(0, byTime.count - 1)
        byTime.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < byTime.count, byTime[left].atMs < byTime[smallest].atMs { smallest = left }
            if right < byTime.count, byTime[right].atMs < byTime[smallest].atMs { smallest = right }
            guard smallest != parent else { return }
            byTime.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
