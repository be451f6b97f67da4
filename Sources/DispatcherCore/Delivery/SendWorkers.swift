import Synchronization

/// The admitted sends of one delivery (a batch, or a request's pages) and the worker tasks that run
/// them (docs/dispatcher-engine.md "Send workers").
///
/// A notification is admitted by the loop that reads its batch, then run by a worker: a child task of
/// the delivery's task group that runs one admitted send after another until the delivery has
/// started its last one. A worker is started only when an admitted send finds none idle, so as many
/// sends run at once as before (admission bounds them), but a task is made per concurrent send, not
/// per notification: a Swift task's frames are allocated in slabs that the task keeps and reuses
/// until it ends, and a task per notification allocated and freed them once per notification (about
/// ten allocations of 1 to 17 KiB each, a tenth of the dispatcher's CPU in a profile of a fan-out).
///
/// Every submitted send is run: a submission that finds no idle worker obliges its caller to start
/// one, and a worker ends only once `close()` was called and nothing is queued, or at an error of its
/// own send (the group is cancelled then; the sends queued for the workers started after it still
/// run, in a cancelled task, as the separate tasks did). `Item` is what a worker takes:
/// `AdmittedSend` in the pipeline.
final class SendWorkers<Item: Sendable>: Sendable {
    private struct State {
        var items: [Item] = []
        /// The first item no worker took yet.
        var head = 0
        var idle: [CheckedContinuation<Item?, Never>] = []
        var closed = false

        mutating func take() -> Item? {
            guard head < items.count else { return nil }
            let item = items[head]
            head += 1
            if head == items.count {
                items.removeAll(keepingCapacity: true)
                head = 0
            }
            return item
        }
    }

    private let state = Mutex(State())

    init() {}

    /// Hands `item` to an idle worker, or queues it.
    /// - Returns: true when no worker was idle: the caller must start one (`run(_:)` in a child task
    ///   of the delivery's group), or the item is never run.
    func submit(_ item: Item) -> Bool {
        let (waiter, start) = state.withLock { state -> (CheckedContinuation<Item?, Never>?, Bool) in
            precondition(!state.closed, "SendWorkers: a send submitted after close()")
            if let waiter = state.idle.popLast() { return (waiter, false) }
            state.items.append(item)
            return (nil, true)
        }
        waiter?.resume(returning: item)
        return start
    }

    /// A worker's loop: runs each send it takes with `send` until `close()` and nothing is left.
    /// - Throws: the first error `send` throws (the worker stops there; the group's other workers
    ///   go on with what is left, as separate tasks did).
    func run(_ send: (Item) async throws -> Void) async throws {
        while let item = await next() {
            try await send(item)
        }
    }

    /// Workers waiting for a send (for tests).
    var idleWorkers: Int { state.withLock { $0.idle.count } }
    /// Sends submitted that no worker took yet (for tests).
    var queued: Int { state.withLock { $0.items.count - $0.head } }

    /// No send is submitted any more: idle workers end; busy ones end once nothing is queued. Called
    /// once, when the delivery's loop ends (also by an error).
    func close() {
        let waiters = state.withLock { state -> [CheckedContinuation<Item?, Never>] in
            state.closed = true
            defer { state.idle = [] }
            return state.idle
        }
        for waiter in waiters { waiter.resume(returning: nil) }
    }

    private func next() async -> Item? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Item?, Never>) in
            let (taken, now) = state.withLock { state -> (Item?, Bool) in
                if let item = state.take() { return (item, true) }
                if state.closed { return (nil, true) }
                state.idle.append(continuation)
                return (nil, false)
            }
            if now { continuation.resume(returning: taken) }
        }
    }
}

/// One admitted notification, as a send worker takes it (`SendRequestProcessor.runSend`).
struct AdmittedSend: Sendable {
    let target: DeliveryTarget
    let permit: NotificationPermit
    let context: SendingContext
}

/// The request's context as its sends take it, shared by the sends of one batch instead of copied
/// into each (`DeliveryContext` is several hundred bytes).
final class SendingContext: Sendable {
    let context: DeliveryContext

    init(_ context: DeliveryContext) {
        self.context = context
    }
}
