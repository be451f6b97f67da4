import ServiceCore
import Synchronization

/// Performs the decisions of ``APNsDeviceGates`` for `APNsClient`: keeps the callers waiting in line
/// for a device token's gate and hands the slot on. Times are the pools' monotonic milliseconds.
final class APNsDeviceGateKeeper: Sendable {
    /// How a caller passed the gate.
    enum Pass: Sendable, Equatable, Hashable {
        /// The gate was open.
        case open
        /// The caller holds the gate's slot: it sends at `notBefore` (ms, the pools' monotonic clock)
        /// and must call ``finish(_:pass:outcome:)``.
        case turn(notBefore: Int64)
    }

    private struct State {
        var gates: APNsDeviceGates
        var lines: [String: [(id: UInt64, continuation: CheckedContinuation<Int64?, Never>)]] = [:]
        var nextID: UInt64 = 0
        /// Slots handed to callers counted in line that have not parked their continuation yet.
        var handoffs: [String: [Int64]] = [:]
    }

    private let state: Mutex<State>
    /// Entries of the map, read without the lock on every send (none: every gate is open).
    private let entries = Atomic<Int>(0)
    private let metrics: APNsClientMetrics
    private let now: @Sendable () -> Int64

    init(policy: APNsDeviceGates.Policy, metrics: APNsClientMetrics, now: @escaping @Sendable () -> Int64) {
        self.state = Mutex(State(gates: APNsDeviceGates(policy: policy)))
        self.metrics = metrics
        self.now = now
    }

    /// Whether `token` has a failure history (see ``APNsDeviceGates/hasFailureHistory(_:)``).
    func hasFailureHistory(_ token: String) -> Bool {
        guard entries.load(ordering: .relaxed) > 0 else { return false }
        return state.withLock { $0.gates.hasFailureHistory(token) }
    }

    /// Whether the gate of `token` is closed now (a send to it may wait in ``pass(_:)``).
    func isClosed(_ token: String) -> Bool {
        guard entries.load(ordering: .relaxed) > 0 else { return false }
        return state.withLock { $0.gates.gates[token]?.closed ?? false }
    }

    /// Why `token`'s gate is closed (for the waiter): its last failure was a timed-out stream or a 429.
    func closedBecause(_ token: String) -> APNsRetryReason {
        state.withLock { $0.gates.gates[token]?.lastFailure == .streamTimeout } ? .streamTimeout : .tooManyRequests
    }

    /// Entries and gated tokens, for tests and status.
    var counts: (entries: Int, gated: Int) { state.withLock { ($0.gates.count, $0.gates.gatedCount) } }

    /// Waits until `token`'s gate lets this caller send: at once when open; otherwise in line for the
    /// slot. The holder of the slot then waits until the gate's backoff ends (`notBefore`) itself.
    /// - Throws: `CancellationError` (nothing held).
    func pass(_ token: String) async throws -> Pass {
        guard entries.load(ordering: .relaxed) > 0 else { return .open }
        let (entry, id) = state.withLock { state -> (APNsDeviceGates.Entry, UInt64) in
            state.nextID += 1
            return (state.gates.enter(token, nowMilliseconds: now()), state.nextID)
        }
        var notBefore: Int64
        switch entry {
        case .open:
            return .open
        case .turn(let at):
            publish()
            notBefore = at
        case .queued:
            publish()
            let handed: Int64? = await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Int64?, Never>) in
                    let ready = state.withLock { state -> Int64?? in
                        if var handed = state.handoffs[token], !handed.isEmpty {
                            let at = handed.removeFirst()
                            state.handoffs[token] = handed.isEmpty ? nil : handed
                            return .some(at)
                        }
                        if Task.isCancelled {
                            state.gates.leaveLine(token)
                            return .some(nil)
                        }
                        state.lines[token, default: []].append((id, continuation))
                        return .none
                    }
                    if let ready { continuation.resume(returning: ready) }
                }
            } onCancel: {
                let waiting = state.withLock { state -> CheckedContinuation<Int64?, Never>? in
                    guard let index = state.lines[token]?.firstIndex(where: { $0.id == id }) else { return nil }
                    let removed = state.lines[token]!.remove(at: index).continuation
                    if state.lines[token]!.isEmpty { state.lines[token] = nil }
                    state.gates.leaveLine(token)
                    return removed
                }
                waiting?.resume(returning: nil)
            }
            publish()
            guard let handed else { throw CancellationError() }
            notBefore = handed
        }
        return .turn(notBefore: notBefore)
    }

    /// A send to `token` (`holdsTurn`: it held the gate's slot) ended with `outcome`: updates the gate and hands the
    /// slot to the first caller in line when it passes on.
    func finish(_ token: String, holdsTurn: Bool, outcome: APNsDeviceGates.Outcome) {
        if !holdsTurn, outcome == .delivered || outcome == .other { return }  // the common case: no lock
        let next = state.withLock { state -> (CheckedContinuation<Int64?, Never>, Int64)? in
            guard let at = state.gates.finish(token, wasTurn: holdsTurn, outcome: outcome, nowMilliseconds: now(),
                                              random: Double.random(in: 0.75...1.0)) else { return nil }
            guard var line = state.lines[token], !line.isEmpty else {
                // The caller counted in line has not parked its continuation yet: it takes the slot
                // when it does.
                state.handoffs[token, default: []].append(at)
                return nil
            }
            let first = line.removeFirst()
            state.lines[token] = line.isEmpty ? nil : line
            return (first.continuation, at)
        }
        if let (continuation, at) = next { continuation.resume(returning: at) }
        publish()
    }

    private func publish() {
        let (count, gated) = counts
        entries.store(count, ordering: .relaxed)
        metrics.deviceGates.set(Double(count))
        metrics.gatedDeviceTokens.set(Double(gated))
    }
}
