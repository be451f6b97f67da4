import Foundation
import Synchronization
import ServiceCore
internal import CNghttp2  // its shim also exports <sys/epoll.h> and <sys/eventfd.h>

/// Something registered with an `EventLoop` for readiness of one file descriptor.
/// Only ever called on the loop's thread.
protocol EventLoopHandler: AnyObject {
    /// The descriptor became readable (or hung up / failed) and/or writable.
    func handleEvent(readable: Bool, writable: Bool)
    /// Called once per loop iteration after events and jobs, when the handler asked for it with
    /// `EventLoop.scheduleFlush(_:)`.
    func flush()
}

/// A thread running `epoll_wait` that owns every connection registered with it.
///
/// Thread-confinement: `handlers`, `timers`, `flushList` and `deferred` are read and written only on
/// the loop's own thread. Other threads talk to the loop only through `execute(_:)`, whose queue is
/// guarded by a `Mutex` and which wakes the thread through an `eventfd`. That is why this class can be
/// `@unchecked Sendable`.
final class EventLoop: @unchecked Sendable {
    private struct Pending {
        var jobs: [@Sendable () -> Void] = []
        var wakeupRequested = false
        var stopped = false
    }

    let name: String
    private let epollFD: Int32
    private let wakeFD: Int32
    private let pending = Mutex(Pending())
    private var thread: Thread!
    private var handlers: [Int32: any EventLoopHandler] = [:]
    private var timers = TimerHeap()
    /// Timers cancelled since the last compaction (cancelled entries stay in the heap until due).
    private let timerStats = TimerStats()
    private var flushList: [any EventLoopHandler] = []
    private var deferred: [() -> Void] = []
    /// One receive buffer shared by every connection of this loop (only one reads at a time).
    let readBuffer: UnsafeMutableRawBufferPointer
    /// Refreshed every iteration; an idle loop still comes round every `heartbeatInterval`. Read by
    /// `/healthz` (registered with `Heartbeats.shared` until the loop stops).
    private let heartbeat: Heartbeat
    /// The longest `epoll_wait` of an idle loop, in milliseconds.
    static let heartbeatIntervalMilliseconds: Int32 = 5_000

    init(name: String) throws(HTTP2Error) {
        self.name = name
        let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard ep >= 0 else { throw HTTP2Error(.internalError, "epoll_create1 failed: \(errnoString())") }
        let wake = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        guard wake >= 0 else {
            close(ep)
            throw HTTP2Error(.internalError, "eventfd failed: \(errnoString())")
        }
        epollFD = ep
        wakeFD = wake
        heartbeat = Heartbeats.shared.register(name)
        readBuffer = .allocate(byteCount: 64 * 1024, alignment: 16)
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(fd: wake))
        epoll_ctl(ep, EPOLL_CTL_ADD, wake, &event)
        let thread = NamedThread.make(name: name) { self.run() }  // the thread keeps the loop alive until stop()
        self.thread = thread
        thread.start()
    }

    deinit {
        close(epollFD)
        close(wakeFD)
        readBuffer.deallocate()
    }

    /// Whether the caller runs on this loop's thread.
    var inLoop: Bool { Thread.current === thread }

    /// Runs `job` on the loop thread soon. Safe from any thread. Returns `false` when stopped.
    @discardableResult
    func execute(_ job: @escaping @Sendable () -> Void) -> Bool {
        let mustWake: Bool? = pending.withLock { state in
            if state.stopped { return nil }
            state.jobs.append(job)
            if state.wakeupRequested { return false }
            state.wakeupRequested = true
            return true
        }
        guard let mustWake else { return false }
        if mustWake {
            var one: UInt64 = 1
            _ = write(wakeFD, &one, 8)
        }
        return true
    }

    /// Stops the loop after the jobs already queued. Handlers still registered are dropped.
    func stop() {
        _ = execute { [self] in
            pending.withLock { $0.stopped = true }
        }
    }

    // MARK: Loop-thread API

    func register(fd: Int32, handler: any EventLoopHandler, writable: Bool) -> Bool {
        handlers[fd] = handler
        var event = epoll_event(events: eventMask(writable), data: epoll_data_t(fd: fd))
        return epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0
    }

    func modify(fd: Int32, writable: Bool) {
        var event = epoll_event(events: eventMask(writable), data: epoll_data_t(fd: fd))
        epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
    }

    func deregister(fd: Int32) {
        handlers[fd] = nil
        var event = epoll_event()
        epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, &event)
    }

    /// Asks for `handler.flush()` at the end of this iteration (at most once per iteration).
    func scheduleFlush(_ handler: any EventLoopHandler) {
        flushList.append(handler)
    }

    /// Runs `body` later in this iteration, outside any C callback in progress.
    func defer_(_ body: @escaping () -> Void) {
        deferred.append(body)
    }

    /// Schedules `action` after `delay`; cancel through the returned token.
    @discardableResult
    func schedule(after delay: Duration, _ action: @escaping () -> Void) -> TimerToken {
        let token = TimerToken(stats: timerStats)
        let ns = UInt64(max(0, delay.components.seconds)) * 1_000_000_000
            + UInt64(max(0, delay.components.attoseconds / 1_000_000_000))
        timers.push(deadline: monotonicNanos() &+ ns, token: token, action: action)
        return token
    }

    private func eventMask(_ writable: Bool) -> UInt32 {
        var mask = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
        if writable { mask |= EPOLLOUT.rawValue }
        return mask
    }

    private func run() {
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while true {
            let timeout: Int32
            if let next = timers.nextDeadline {
                let now = monotonicNanos()
                timeout = next <= now ? 0 : Int32(min((next - now + 999_999) / 1_000_000, UInt64(Self.heartbeatIntervalMilliseconds)))
            } else {
                timeout = Self.heartbeatIntervalMilliseconds
            }
            let count = epoll_wait(epollFD, events, Int32(capacity), timeout)
            heartbeat.beat()
            // Woken by `execute` alone (no socket ready), the loop gives up the core once
            // (sched_yield(2)) before it takes the queued jobs. A thread of lower CPU priority (a
            // campaign's, at PUSH_CAMPAIGN_NICE) that queued a job is preempted by this wakeup; the
            // yield lets it queue the rest of its work, and this iteration runs the jobs together
            // instead of one per wakeup (docs/campaigns.md, "The CPU"). Returns at once when
            // nothing else wants the core.
            if count == 1 && events[0].data.fd == wakeFD { sched_yield() }
            if count > 0 {
                for i in 0..<Int(count) {
                    let fd = events[i].data.fd
                    let mask = events[i].events
                    if fd == wakeFD {
                        var value: UInt64 = 0
                        _ = read(wakeFD, &value, 8)
                        continue
                    }
                    guard let handler = handlers[fd] else { continue }
                    let readable = mask & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue | EPOLLRDHUP.rawValue) != 0
                    handler.handleEvent(readable: readable, writable: mask & EPOLLOUT.rawValue != 0)
                }
            }
            let (jobs, stopped) = pending.withLock { state in
                let jobs = state.jobs
                state.jobs.removeAll(keepingCapacity: true)
                state.wakeupRequested = false
                return (jobs, state.stopped)
            }
            for job in jobs { job() }
            if timers.nextDeadline != nil {
                let now = monotonicNanos()
                while let action = timers.popDue(now: now) { action() }
            }
            // A cancelled timer keeps its action (and what it captured: a request and its body)
            // until its deadline; drop them once they are the majority, so memory follows the
            // live timers, not the request rate times the timeout.
            if timerStats.cancelled > 1024 && timerStats.cancelled * 2 > timers.count {
                timers.removeCancelled()
                timerStats.cancelled = 0
            }
            drainDeferredAndFlushes()
            if stopped {
                Heartbeats.shared.remove(heartbeat)
                handlers.removeAll()
                timers = TimerHeap()
                return
            }
        }
    }

    private func drainDeferredAndFlushes() {
        while !deferred.isEmpty || !flushList.isEmpty {
            if !deferred.isEmpty {
                let work = deferred
                deferred.removeAll()
                for item in work { item() }
            }
            if !flushList.isEmpty {
                let list = flushList
                flushList.removeAll(keepingCapacity: true)
                for handler in list { handler.flush() }
            }
        }
    }
}

/// Cancels a timer scheduled with `EventLoop.schedule(after:_:)`. Loop-thread only.
final class TimerToken {
    private(set) var cancelled = false
    private let stats: TimerStats
    init(stats: TimerStats) { self.stats = stats }
    func cancel() {
        guard !cancelled else { return }
        cancelled = true
        stats.cancelled += 1
    }
}

/// Counts cancelled timers of one loop. Loop-thread only.
final class TimerStats {
    var cancelled = 0
}

/// Binary min-heap of timers by deadline (monotonic ns).
struct TimerHeap {
    private struct Entry {
        let deadline: UInt64
        let token: TimerToken
        let action: () -> Void
    }
    private var entries: [Entry] = []

    var nextDeadline: UInt64? { entries.first?.deadline }
    var count: Int { entries.count }

    /// Drops cancelled entries and restores the heap order (O(n)).
    mutating func removeCancelled() {
        entries.removeAll { $0.token.cancelled }
        var index = entries.count / 2
        while index > 0 {
            index -= 1
            siftDown(index)
        }
    }

    mutating func push(deadline: UInt64, token: TimerToken, action: @escaping () -> Void) {
        entries.append(Entry(deadline: deadline, token: token, action: action))
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            if entries[parent].deadline <= entries[child].deadline { break }
            entries.swapAt(parent, child)
            child = parent
        }
    }

    /// The action of the earliest timer due at `now` that was not cancelled, removing it.
    mutating func popDue(now: UInt64) -> (() -> Void)? {
        while let first = entries.first, first.deadline <= now {
            removeFirst()
            if !first.token.cancelled { return first.action }
        }
        return nil
    }

    private mutating func removeFirst() {
        let last = entries.removeLast()
        guard !entries.isEmpty else { return }
        entries[0] = last
        siftDown(0)
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < entries.count, entries[left].deadline < entries[smallest].deadline { smallest = left }
            if right < entries.count, entries[right].deadline < entries[smallest].deadline { smallest = right }
            if smallest == parent { return }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

/// Nanoseconds on the monotonic clock.
func monotonicNanos() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

func errnoString(_ code: Int32 = errno) -> String {
    String(cString: strerror(code))
}

/// A fixed-size group of event loops, handed out round-robin.
final class EventLoopGroup: Sendable {
    let loops: [EventLoop]
    private let nextIndex = Atomic<Int>(0)

    init(count: Int, name: String) throws(HTTP2Error) {
        var loops: [EventLoop] = []
        for i in 0..<max(1, count) {
            loops.append(try EventLoop(name: "\(name)-\(i)"))
        }
        self.loops = loops
    }

    func next() -> EventLoop {
        let i = nextIndex.add(1, ordering: .relaxed).oldValue
        return loops[i % loops.count]
    }

    func stop() {
        for loop in loops { loop.stop() }
    }
}
