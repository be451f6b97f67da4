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
            // An unstructured task does not inherit the preference: the campaign runner's lease
            // renewals rely on it to stay on the cooperative pool.
            let unstructured = await Task { BackgroundTaskExecutor.currentNiceness() }.value
            return seen + children + [unstructured]
        }
        #expect(seen.count == 11)
        #expect(seen.dropLast().allSatisfy { $0 == 7 }, "niceness seen: \(seen)")
        #expect(seen.last == 0)
        // The caller's own thread (the cooperative pool) kept its priority.
        #expect(BackgroundTaskExecutor.currentNiceness() == 0)
    }
}
