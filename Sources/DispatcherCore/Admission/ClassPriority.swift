import Synchronization

/// The class of work a notification belongs to (docs/dispatcher-engine.md "Class priority"): a small
/// request's notifications, a large request's (a user fan-out read in pages, or device tokens past
/// one page), a campaign's or scheduled request's pages.
enum WorkClass: Int, Sendable, CaseIterable {
    case transactional = 0
    case bulk = 1
    case campaign = 2

    /// 0 goes first. Bulk and campaign work share a rank: neither holds the other back.
    var rank: Int { self == .transactional ? 0 : 1 }
}

/// The decisions of class priority, without I/O: a candidate passes only when no candidate of a
/// higher rank (`WorkClass.rank`) is being admitted or queued; otherwise it queues behind its own class
/// (first come, first served). Transactional candidates never wait here. When the last candidate of
/// the higher rank leaves, the queued ones are let through together.
///
/// "Being admitted": past this gate and not yet through the rest of the chain, which is where a
/// candidate waits for its budget. So while requests wait for the in-flight budget, no campaign or
/// bulk notification starts; once they are through, lower classes start again (they are never
/// starved by a request rate the budget keeps up with).
struct ClassPriorityState: Sendable {
    /// Candidates past the gate whose admission has not ended, by class.
    private(set) var admitting = [Int](repeating: 0, count: WorkClass.allCases.count)
    /// Waiter ids queued, by class, in arrival order.
    private(set) var queued = [[Int]](repeating: [], count: WorkClass.allCases.count)

    /// Whether a candidate of `workClass` may pass now: nothing of a higher rank admitting or queued.
    func mayPass(_ workClass: WorkClass) -> Bool {
        WorkClass.allCases.allSatisfy { $0.rank >= workClass.rank || (admitting[$0.rawValue] == 0 && queued[$0.rawValue].isEmpty) }
    }

    /// A candidate arrives. - Returns: true when it passed (it is admitting now); false when it was
    /// queued as `waiter`.
    mutating func enter(_ workClass: WorkClass, waiter: Int) -> Bool {
        if mayPass(workClass), queued[workClass.rawValue].isEmpty {
            admitting[workClass.rawValue] += 1
            return true
        }
        queued[workClass.rawValue].append(waiter)
        return false
    }

    /// A candidate that passed ends its admission (admitted, settled or failed).
    /// - Returns: the waiters let through now (they are admitting).
    mutating func leave(_ workClass: WorkClass) -> [Int] {
        admitting[workClass.rawValue] = max(0, admitting[workClass.rawValue] - 1)
        return release()
    }

    /// A queued waiter gave up (its task was cancelled).
    /// - Returns: whether it was still queued, and the waiters let through now.
    mutating func withdraw(_ waiter: Int, of workClass: WorkClass) -> (wasQueued: Bool, released: [Int]) {
        guard let index = queued[workClass.rawValue].firstIndex(of: waiter) else { return (false, []) }
        queued[workClass.rawValue].remove(at: index)
        return (true, release())
    }

    /// Lets through the queued waiters of every class that may pass now.
    private mutating func release() -> [Int] {
        var released: [Int] = []
        for workClass in WorkClass.allCases where !queued[workClass.rawValue].isEmpty && mayPass(workClass) {
            released += queued[workClass.rawValue]
            admitting[workClass.rawValue] += queued[workClass.rawValue].count
            queued[workClass.rawValue] = []
        }
        return released
    }
}

/// `ClassPriorityState` shared by every source of one processor, with the waiters' continuations.
final class ClassPriorityGate: Sendable {
    private struct State {
        var decisions = ClassPriorityState()
        var continuations: [Int: CheckedContinuation<Void, any Error>] = [:]
        var nextID = 0
        var lastTransactionalAdmission: ContinuousClock.Instant?
    }

    private let state = Mutex(State())

    init() {}

    /// Waits until a candidate of `workClass` may pass (at once for transactional ones).
    /// - Throws: `CancellationError` when the task is cancelled while queued (it then never passed).
    func enter(_ workClass: WorkClass) async throws {
        try Task.checkCancellation()
        // The common case (every transactional candidate, and the others while nothing of a higher
        // rank is admitting) passes under one lock, without a continuation: this runs per notification.
        let now: ContinuousClock.Instant? = workClass == .transactional ? .now : nil
        let queuedAs = state.withLock { state -> Int? in
            state.nextID += 1
            if let now { state.lastTransactionalAdmission = now }
            guard state.decisions.mayPass(workClass), state.decisions.queued[workClass.rawValue].isEmpty else { return state.nextID }
            _ = state.decisions.enter(workClass, waiter: state.nextID)  // passes: the same test as `enter`'s
            return nil
        }
        guard let id = queuedAs else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let passed = state.withLock { state -> Bool? in
                    if Task.isCancelled { return nil }
                    if state.decisions.enter(workClass, waiter: id) { return true }
                    state.continuations[id] = continuation
                    return false
                }
                switch passed {
                case true?: continuation.resume()
                case nil: continuation.resume(throwing: CancellationError())
                case false?: break
                }
            }
        } onCancel: {
            let (cancelled, released) = state.withLock { state -> (CheckedContinuation<Void, any Error>?, [CheckedContinuation<Void, any Error>]) in
                let (wasQueued, released) = state.decisions.withdraw(id, of: workClass)
                let cancelled = wasQueued ? state.continuations.removeValue(forKey: id) : nil
                return (cancelled, released.compactMap { state.continuations.removeValue(forKey: $0) })
            }
            cancelled?.resume(throwing: CancellationError())
            for continuation in released { continuation.resume() }
        }
    }

    /// A candidate that passed `enter` ends its admission.
    func leave(_ workClass: WorkClass) {
        let released = state.withLock { state in
            state.decisions.leave(workClass).compactMap { state.continuations.removeValue(forKey: $0) }
        }
        for continuation in released { continuation.resume() }
    }

    /// When the last transactional candidate arrived at the gate (they never wait); nil before the
    /// first. The campaign runner reads it to see whether transactional work flows
    /// (`TransactionalActivity`).
    var lastTransactionalAdmission: ContinuousClock.Instant? { state.withLock { $0.lastTransactionalAdmission } }

    /// Candidates queued now, by class (for tests and the docs' example).
    var queued: [WorkClass: Int] {
        state.withLock { state in
            Dictionary(uniqueKeysWithValues: WorkClass.allCases.map { ($0, state.decisions.queued[$0.rawValue].count) })
        }
    }
}

/// Admission by class priority (`ClassPriorityState`): first in every chain of a processor's sources,
/// so that transactional notifications waiting for their budget go before campaign and bulk ones.
/// `admissionEnded` lets lower classes through once the chain is done with the candidate.
struct ClassPriorityPolicy: AdmissionPolicy {
    let gate: ClassPriorityGate
    let workClass: WorkClass

    func admit(_ candidate: AdmissionCandidate, permit: NotificationPermit) async throws -> AdmissionVerdict {
        try await gate.enter(workClass)
        return .admit
    }

    func admissionEnded(_ candidate: AdmissionCandidate) { gate.leave(workClass) }
}
