import Foundation
import Testing
@testable import ServiceCore
/// The kernel's name of the calling thread (`/proc/thread-self/comm`, what `top -H` and `perf` show).
private func kernelNameOfThisThread() -> String {
    ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .newlines)
}

@Suite struct NamedThreadTests {
    /// Every thread of the project's own carries its name in the kernel, cut to 15 bytes; before,
    /// Foundation's `Thread.name` never reached the kernel and every one of them showed the name of
    /// the thread that started it.
    @Test func threadsOfTheProjectCarryTheirNameInTheKernel() async throws {
        let connection = DedicatedThread(name: "pg-conn-7")
        defer { connection.shutdown() }
        #expect(try await connection.run { kernelNameOfThisThread() } == "pg-conn-7")
        let long = DedicatedThread(name: "a-thread-with-a-long-name")
        defer { long.shutdown() }
        #expect(try await long.run { kernelNameOfThisThread() } == "a-thread-with-a")

        let executor = BackgroundTaskExecutor(name: "campaign", threads: 2, niceness: 0)
        let onExecutor = await withTaskExecutorPreference(executor) { kernelNameOfThisThread() }
        #expect(["campaign-1", "campaign-2"].contains(onExecutor), "ran on \(onExecutor)")

        let seen = await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
            NamedThread.start(name: "http2-client-127.0.0.1:2197") { continuation.resume(returning: kernelNameOfThisThread()) }
        }
        #expect(seen == "http2-client-12")
    }

    /// The kernel keeps 15 bytes: a longer name is cut there, never inside a character (a cut
    /// character would make `pthread_setname_np` store invalid UTF-8).
    @Test func kernelNamesAreCutAtFifteenBytesOnACharacterBoundary() {
        #expect(NamedThread.kernelName("malloc-trim") == "malloc-trim")
        #expect(NamedThread.kernelName("exactly-15-byte") == "exactly-15-byte")
        #expect(NamedThread.kernelName("exactly-16-bytes") == "exactly-16-byte")
        // "é" is two bytes: 14 ASCII bytes leave room for one byte only, so it is left out.
        #expect(NamedThread.kernelName("fourteen-bytesé") == "fourteen-bytes")
        #expect(NamedThread.kernelName("") == "")
    }
}
