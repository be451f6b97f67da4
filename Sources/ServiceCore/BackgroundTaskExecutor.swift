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
    private let queue = JobQueue()
    /// The threads' nice value (0 to 19; higher yields more).
    public let niceness: Int32

    /// Starts `threads` threads named `name-1`, `name-2`, … at nice value `niceness`.
    /// - Precondition: `threads` ≥ 1; `niceness` in 0...19.
    public init(name: String, threads: Int, niceness: Int32) {
        precondition(threads >= 1 && (0...19).contains(niceness), "BackgroundTaskExecutor: threads ≥ 1, niceness 0...19")
        self.niceness = niceness
        let queue = self.queue
        for index in 1...threads {
            let thread = Thread {
                Self.lowerPriority(to: niceness)
                while let job = queue.next() { job() }
            }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    /// Runs `job` on one of the threads.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        _ = queue.append { job.runSynchronously(on: executor) }
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
