import Foundation
import Testing
@testable import ServiceCore

@Suite struct BackgroundTaskExecutorTests {
    /// Work preferred onto the executor runs on its lowered threads: at the start, after a
    /// suspension (a continuation resumed from another thread), and in child tasks.
    @Test func runsPreferredWorkAndItsChildrenAtTheLowerPriority() async throws {
        let executor = BackgroundTaskExecutor(name: "test-background", threads: 2, niceness: 7)
        let seen = await withTaskExecutorPreference(executor) { () -> [Int32] in
            var seen = [BackgroundTaskExecutor.currentNiceness()]
            // Resumed from a thread that is not the executor's.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                Thread { continuation.resume() }.start()
            }
            seen.append(BackgroundTaskExecutor.currentNiceness())
            let children = await withTaskGroup(of: Int32.self) { group in
                for _ in 0..<8 { group.addTask { BackgroundTaskExecutor.currentNiceness() } }
                return await group.reduce(into: [Int32]()) { $0.append($1) }
            }
            // A child that prefers the global concurrent executor runs on the cooperative pool: the
            // campaign runner's lease renewals do so, so that a busy machine never delays them.
            let renewal = await withTaskGroup(of: Int32.self) { group in
                group.addTask { await withTaskExecutorPreference(globalConcurrentExecutor) { BackgroundTaskExecutor.currentNiceness() } }
                return await group.next() ?? -1
            }
            return seen + children + [renewal]
        }
        #expect(seen.count == 11)
        #expect(seen.dropLast().allSatisfy { $0 == 7 }, "niceness seen: \(seen)")
        #expect(seen.last == 0, "a child preferring the global concurrent executor ran at niceness \(seen.last ?? -1)")
        // The caller's own thread (the cooperative pool) kept its priority.
        #expect(BackgroundTaskExecutor.currentNiceness() == 0)
    }
}
