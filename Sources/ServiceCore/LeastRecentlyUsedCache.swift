/// A dictionary of at most `capacity` entries: inserting into a full one evicts the entry used least
/// recently (read or written). Every operation is O(1): the entries form a doubly linked list in an
/// array, most recently used first, and a dictionary finds a key's slot. Not thread-safe: keep it
/// under the owner's lock (a rate limiter's buckets per caller-chosen key, where the key space is
/// unbounded and memory must not be).
public struct LeastRecentlyUsedCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Entry: Sendable {
        var key: Key
        var value: Value
        var newer: Int
        var older: Int
    }

    /// The most entries kept; ≥ 1.
    public let capacity: Int
    private var slots: [Key: Int] = [:]
    private var entries: [Entry] = []
    private var newest = -1
    private var oldest = -1

    /// An empty cache.
    /// - Parameter capacity: the most entries kept, ≥ 1.
    public init(capacity: Int) {
        precondition(capacity >= 1, "a cache holds at least one entry")
        self.capacity = capacity
    }

    /// How many entries it holds (≤ `capacity`).
    public var count: Int { slots.count }

    /// The value of `key`, marking it the most recently used; nil when absent (evicted or never set).
    public mutating func value(forKey key: Key) -> Value? {
        guard let slot = slots[key] else { return nil }
        moveToFront(slot)
        return entries[slot].value
    }

    /// Sets the value of `key` and marks it the most recently used; when the cache is full and `key`
    /// is new, the least recently used entry makes room.
    /// - Returns: the key evicted, if any.
    @discardableResult
    public mutating func set(_ value: Value, forKey key: Key) -> Key? {
        if let slot = slots[key] {
            entries[slot].value = value
            moveToFront(slot)
            return nil
        }
        guard slots.count >= capacity else {
            entries.append(Entry(key: key, value: value, newer: -1, older: -1))
            let slot = entries.count - 1
            slots[key] = slot
            linkAtFront(slot)
            return nil
        }
        // Reuse the oldest entry's slot for the new key.
        let slot = oldest
        let evicted = entries[slot].key
        unlink(slot)
        slots[evicted] = nil
        entries[slot].key = key
        entries[slot].value = value
        slots[key] = slot
        linkAtFront(slot)
        return evicted
    }

    private mutating func moveToFront(_ slot: Int) {
        guard slot != newest else { return }
        unlink(slot)
        linkAtFront(slot)
    }

    private mutating func unlink(_ slot: Int) {
        let newer = entries[slot].newer
        let older = entries[slot].older
        if newer >= 0 { entries[newer].older = older } else { newest = older }
        if older >= 0 { entries[older].newer = newer } else { oldest = newer }
        entries[slot].newer = -1
        entries[slot].older = -1
    }

    private mutating func linkAtFront(_ slot: Int) {
        entries[slot].older = newest
        entries[slot].newer = -1
        if newest >= 0 { entries[newest].newer = slot }
        newest = slot
        if oldest < 0 { oldest = slot }
    }
}
