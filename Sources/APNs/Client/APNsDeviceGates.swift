import ServiceCore

/// The per-device gates of one `APNsClient`, as a value (docs/apns-client.md "Per-device gate"): what
/// one device token does never slows the others, and a device that Apple throttles or that never
/// answers is not hammered.
///
/// After a failure that belongs to one device token — a 429 `TooManyRequests` (Apple: too many
/// requests to the same device token, docs/apns-protocol.md §3) or a stream that timed out — that
/// token's gate closes: its notifications wait behind one backoff (``Policy/backoff``, growing per
/// strike, with jitter) and then go **one at a time**: the next one goes when the one before it has
/// an outcome (at once after a success, after the next backoff after another token failure). The gate
/// opens again when a notification sent through it is delivered and nobody waits behind it.
/// Failures of sends that were already under way when the gate closed add no strike (one backoff for
/// the whole burst).
///
/// The map is bounded: past ``Policy/capacity`` entries, the least recently used ones that nobody
/// waits on are evicted (a tenth at a time). An open entry keeps its strikes as history for
/// ``Policy/memory`` (the next backoff starts there, and the circuit breaker's half-open trial is
/// never one of its notifications).
///
/// A pure value: time (ms, any monotonic origin) and randomness are passed in; the client keeps the
/// waiting callers.
public struct APNsDeviceGates: Sendable {
    /// Timings and bounds.
    public struct Policy: Sendable, Hashable {
        /// The wait after the n-th strike: `initial × 2^(n-1)` capped at `maximum`, times 0.5…1.
        /// Default 1 s doubling to 30 s (`RetryPolicy.tooManyRequestsDelay`, `backoff.maximum`).
        public var backoff = APNsClient.Configuration.Backoff(initial: .seconds(1), maximum: .seconds(30))
        /// Most entries kept. Default 100,000.
        public var capacity: Int = 100_000
        /// How long an open gate's strikes are remembered. Default 10 minutes.
        public var memory: Duration = .seconds(600)

        /// The defaults listed on each property.
        public init() {}
    }

    /// What the caller about to send to a device token must do.
    public enum Entry: Sendable, Hashable {
        /// The gate is open: send as usual.
        case open
        /// The caller holds the gate's one slot: send at `notBefore` (ms) and report the outcome with
        /// ``finish(_:wasTurn:outcome:nowMilliseconds:random:)`` (`wasTurn: true`).
        case turn(notBefore: Int64)
        /// Someone else holds the slot: wait in line; ``finish(_:wasTurn:outcome:nowMilliseconds:random:)``
        /// hands the slot to the first in line.
        case queued
    }

    /// How a send to a device token ended, as far as its gate is concerned.
    public enum Outcome: Sendable, Hashable {
        /// APNs accepted it (200).
        case delivered
        /// A failure of the device token: 429 `TooManyRequests`.
        case tokenFailure
        /// A failure of the device token: its stream timed out (counted like ``tokenFailure``).
        case streamTimeout
        /// Anything else (another answer, a lost connection, not processed, given up): the slot passes on.
        case other
    }

    /// One gate.
    public struct Gate: Sendable, Hashable {
        /// Token failures so far (the backoff exponent), lowered by one per delivery after a failure.
        public var strikes = 0
        /// Closed: notifications go one at a time behind the backoff.
        public var closed = false
        /// The next send may not start before this (ms).
        public var notBefore: Int64 = 0
        /// A caller holds the slot.
        public var busy = false
        /// Callers in line.
        public var waiting = 0
        /// The last change (ms), for the memory and the LRU order.
        public var lastUsed: Int64 = 0
        /// Whether a delivery came since the last token failure.
        var deliveredSinceFailure = false
        /// When the gate last opened (ms): its strikes are forgotten ``Policy/memory`` after it.
        var openedAt: Int64 = 0
        /// The last token failure (``Outcome/tokenFailure`` or ``Outcome/streamTimeout``).
        public var lastFailure: Outcome?
    }

    /// The policy in force.
    public let policy: Policy
    /// The gates by device token (lowercase hex).
    public private(set) var gates: [String: Gate] = [:]
    /// Tokens whose gate is closed or has someone in it (the metric `push_apns_gated_device_tokens`).
    public private(set) var gatedCount = 0

    /// Creates an empty map.
    public init(policy: Policy = Policy()) {
        self.policy = policy
    }

    /// Whether `token` has a failure history (strikes not yet worked off, or its gate closed): its
    /// notifications are never the circuit breaker's half-open trial.
    public func hasFailureHistory(_ token: String) -> Bool {
        guard let gate = gates[token] else { return false }
        return gate.closed || gate.strikes > 0
    }

    /// A caller is about to send to `token` at `now` (ms).
    public mutating func enter(_ token: String, nowMilliseconds now: Int64) -> Entry {
        guard var gate = gates[token], gate.closed else { return .open }
        let wasGated = Self.isGated(gate)
        defer { store(token, gate, wasGated: wasGated) }
        gate.lastUsed = now
        if !gate.busy {
            gate.busy = true
            return .turn(notBefore: gate.notBefore)
        }
        gate.waiting += 1
        return .queued
    }

    /// A caller in line stopped waiting (cancelled) before it got the slot.
    public mutating func leaveLine(_ token: String) {
        guard var gate = gates[token], gate.waiting > 0 else { return }
        let wasGated = Self.isGated(gate)
        gate.waiting -= 1
        store(token, gate, wasGated: wasGated)
    }

    /// A send to `token` ended with `outcome` at `now` (ms); `wasTurn`: it held the gate's slot.
    /// Returns when the first caller in line may send (ms) if the slot passes to it (the caller
    /// resumes it), or nil.
    /// - Parameter random: the jitter factor (0…1; the client draws it in 0.75…1.0).
    public mutating func finish(_ token: String, wasTurn: Bool, outcome: Outcome, nowMilliseconds now: Int64, random: Double) -> Int64? {
        var gate = gates[token] ?? Gate()
        let wasGated = Self.isGated(gate)
        defer {
            evictIfNeeded(keeping: token)
        }
        gate.lastUsed = now
        switch outcome {
        case .tokenFailure, .streamTimeout:
            // A send under way when the gate closed: the gate's backoff covers it already.
            if gate.closed && !wasTurn { return nil }
            if !gate.closed && now - gate.openedAt > policy.memory.wholeMilliseconds { gate.strikes = 0 }
            gate.strikes += 1
            gate.closed = true
            gate.deliveredSinceFailure = false
            gate.lastFailure = outcome
            gate.notBefore = now + policy.backoff.delay(afterFailures: gate.strikes, random: random).wholeMilliseconds
        case .delivered:
            guard wasTurn else { return nil }
            if !gate.deliveredSinceFailure {
                gate.strikes = max(0, gate.strikes - 1)
                gate.deliveredSinceFailure = true
            }
            gate.notBefore = now
            if gate.waiting == 0 {
                gate.closed = false
                gate.openedAt = now
            }
        case .other:
            guard wasTurn else { return nil }
        }
        if wasTurn { gate.busy = false }
        var promoted: Int64?
        if gate.closed, !gate.busy, gate.waiting > 0 {
            gate.busy = true
            gate.waiting -= 1
            promoted = gate.notBefore
        }
        store(token, gate, wasGated: wasGated)
        return promoted
    }

    /// Entries in the map (the metric `push_apns_device_gates`).
    public var count: Int { gates.count }

    private static func isGated(_ gate: Gate) -> Bool { gate.closed || gate.busy || gate.waiting > 0 }

    private mutating func store(_ token: String, _ gate: Gate, wasGated: Bool) {
        let isGated = Self.isGated(gate)
        if isGated != wasGated { gatedCount += isGated ? 1 : -1 }
        gates[token] = gate
    }

    /// Past the capacity, drops the least recently used tenth of the entries nobody waits on.
    private mutating func evictIfNeeded(keeping token: String) {
        guard gates.count > max(1, policy.capacity) else { return }
        let target = max(1, policy.capacity - policy.capacity / 10)
        let idle = gates.filter { !$0.value.busy && $0.value.waiting == 0 && $0.key != token }.sorted { $0.value.lastUsed < $1.value.lastUsed }
        for (key, gate) in idle.prefix(gates.count - target) {
            if Self.isGated(gate) { gatedCount -= 1 }
            gates[key] = nil
        }
    }
}
