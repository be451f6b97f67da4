import Foundation
import Glibc

/// A task executor whose threads run at a lower CPU priority than Swift's cooperative pool: work
/// preferred onto it (`withTaskExecutorPreference`, SE-0417) takes the CPU that the rest of the
/// process leaves, and gives it back as soon as the cooperative pool's threads want it.
///
/// The dispatcher runs campaigns on one (docs/campaigns.md "Lanes"): on a machine whose cores are
/// busy, the kernel's scheduler then serves a transactional request's jobs before a campaign's,
/// which a queue inside the process cannot do once both wait for the same two threads.
///
/// Linux gives each thread its own nice value (setpriority(2), "BUGS" in its manual page); lowering
/// one's own priority needs no privilege. Linux only (the project's platform).
/// Threads live as long as the process; jobs run in any order across them.
public final class BackgroundTaskExecutor: TaskExecutor, Sendable {
    private let queue = ReadyJobs()
    /// The threads' nice value (0 to 19; higher yields more).
    public let niceness: Int32

    /// Starts `threads` threads named `name-1`, `name-2`, … at nice value `niceness`.
    /// - Precondition: `threads` ≥ 1; `niceness` in 0...19.
    public init(name: String, threads: Int, niceness: Int32) {
        precondition(threads >= 1 && (0...19).contains(niceness), "BackgroundTaskExecutor: threads ≥ 1, niceness 0...19")
        self.niceness = niceness
        let queue = self.queue
        for index in 1...threads {
            NamedThread.start(name: "\(name)-\(index)") {
                Self.lowerPriority(to: niceness)
                let executor = self.asUnownedTaskExecutor()
                while true { queue.next().runSynchronously(on: executor) }
            }
        }
    }

    /// Runs `job` on one of the threads.
    public func enqueue(_ job: consuming ExecutorJob) {
        queue.append(UnownedJob(job))
    }

    /// The calling thread's nice value.
    static func currentNiceness() -> Int32 {
        errno = 0
        return getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
    }

    /// Linux applies `setpriority(PRIO_PROCESS, 0, …)` to the calling thread only (the kernel's
    /// "current" task is the thread), which is what lowers one thread and not the whole process.
    private static func lowerPriority(to niceness: Int32) {
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, niceness)
    }
}

/// The jobs ready to run, shared by the executor's threads: no allocation per job (a job is one
/// pointer), and a waiting thread is only signalled when one waits. Guarded by one `NSCondition`.
private final class ReadyJobs: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var head = 0
    private var idleThreads = 0

    func append(_ job: UnownedJob) {
        condition.lock()
        jobs.append(job)
        let wake = idleThreads > 0
        condition.unlock()
        if wake { condition.signal() }
    }

    /// The oldest ready job, waiting for one.
    func next() -> UnownedJob {
        condition.lock()
        defer { condition.unlock() }
        while head == jobs.count {
            idleThreads += 1
            condition.wait()
            idleThreads -= 1
        }
        let job = jobs[head]
        head += 1
        if head == jobs.count {
            jobs.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1024, head * 2 > jobs.count {
            jobs.removeFirst(head)
            head = 0
        }
        return job
    }
}
