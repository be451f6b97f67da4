import Foundation
import Synchronization
import Testing
@testable import ServiceCore

@Suite struct DedicatedThreadTests {
    @Test func runsJobsInOrderOffTheCooperativePool() async throws {
        let thread = DedicatedThread(name: "test-blocking")
        var results: [Int] = []
        for i in 0..<20 {
            let value = try await thread.run { () -> Int in
                usleep(1000)  // a blocking call, as PQexec would be
                return i
            }
            results.append(value)
        }
        #expect(results == Array(0..<20))
        let first = try await thread.run { UInt(pthread_self()) }
        let second = try await thread.run { UInt(pthread_self()) }
        #expect(first == second)
        #expect(first != UInt(pthread_self()))
    }

    /// What a job captured is freed once the job ran, while the thread lives on: a pooled
    /// PostgreSQL connection's thread kept every statement's parameters of its last 1,024 jobs (a
    /// `send_log` batch's are about 300 KB), hundreds of MB across a 100,000-token request.
    @Test func freesWhatAJobCapturedOnceItRan() async throws {
        final class Payload: Sendable {
            let bytes = [UInt8](repeating: 1, count: 1_000)
        }
        final class WeakBox: @unchecked Sendable {
            weak var payload: Payload?
        }
        let thread = DedicatedThread(name: "test-frees")
        var boxes: [WeakBox] = []
        for index in 0..<5 {
            let payload = Payload()
            let box = WeakBox()
            box.payload = payload
            boxes.append(box)
            if index.isMultiple(of: 2) {
                let count = try await thread.run { payload.bytes.count }
                #expect(count == 1_000)
            } else {
                thread.submit { _ = payload.bytes.count }
            }
        }
        _ = try await thread.run { 0 }  // every job above ran
        let deadline = ContinuousClock.now + .seconds(5)
        while boxes.contains(where: { $0.payload != nil }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(boxes.filter { $0.payload != nil }.count == 0)
        withExtendedLifetime(thread) {}
    }

    @Test func rejectsWorkAfterShutdown() async throws {
        let thread = DedicatedThread(name: "test-stopped")
        thread.shutdown()
        await #expect(throws: CancellationError.self) { try await thread.run { 1 } }
    }

    @Test func rethrowsTheJobsError() async {
        struct Boom: Error {}
        let thread = DedicatedThread(name: "test-throws")
        await #expect(throws: Boom.self) { try await thread.run { () throws -> Int in throw Boom() } }
        await #expect(throws: Boom.self) { try await thread.runUnlessCancelled { () throws -> Int in throw Boom() } }
    }

    /// `runUnlessCancelled`: returns the job's result; a cancelled caller stops waiting at once while the
    /// job (2 s of blocking) still runs to its end on the thread; an already cancelled caller and a shut
    /// down thread get `CancellationError`.
    @Test func runUnlessCancelledStopsWaitingOnCancellation() async throws {
        let thread = DedicatedThread(name: "test-unless-cancelled")
        #expect(try await thread.runUnlessCancelled { 7 } == 7)
        let finished = Mutex(false)
        let waiting = Task {
            try await thread.runUnlessCancelled { () -> Int in
                usleep(2_000_000)
                finished.withLock { $0 = true }
                return 1
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        let clock = ContinuousClock()
        let start = clock.now
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(clock.now - start < .seconds(1))
        #expect(!finished.withLock { $0 })
        _ = try await thread.run { 0 }  // queued behind the abandoned job: it ran to its end
        #expect(finished.withLock { $0 })

        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await thread.runUnlessCancelled { 1 }
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        thread.shutdown()
        await #expect(throws: CancellationError.self) { try await thread.runUnlessCancelled { 1 } }
    }
}

@Suite struct EnvironmentConfigTests {
    @Test func namesTheWrongVariable() throws {
        let config = EnvironmentConfig(["PORT": "80x", "FLAG": "maybe"])
        #expect(throws: EnvironmentConfig.Error.self) { try config.int("PORT", default: 1) }
        do {
            _ = try config.bool("FLAG", default: false)
            Issue.record("expected an error")
        } catch let error as EnvironmentConfig.Error {
            #expect(error.description.contains("FLAG"))
        }
        #expect(throws: EnvironmentConfig.Error.self) { try config.required("MISSING") }
        #expect(try config.int("UNSET", default: 7) == 7)
    }
}

@Suite struct LoggerTests {
    @Test func quotesValuesThatNeedIt() {
        #expect(Logger.quote("plain") == "plain")
        #expect(Logger.quote("two words") == "\"two words\"")
        #expect(Logger.quote("a\"b") == "\"a\\\"b\"")
        #expect(Logger.quote("") == "\"\"")
    }
}

@Suite struct WallClockTests {
    @Test func manualClockAdvances() {
        let clock = ManualWallClock(milliseconds: 1_000)
        clock.advance(by: .seconds(3600))
        #expect(clock.nowMilliseconds() == 3_601_000)
        #expect(clock.nowSeconds() == 3_601)
    }
}

/// The malloc arena limit of the executables (README "Operations", memory).
@Suite struct MallocArenasTests {
    @Test func theOperatorsSettingWinsElseTwoArenas() {
        #expect(MallocArenas.limitUnlessConfigured(environment: ["MALLOC_ARENA_MAX": "8"]) == nil)
        #expect(MallocArenas.limitUnlessConfigured(environment: [:]) == MallocArenas.defaultLimit)
    }

    @Test func trimGivesFreedMemoryBackToTheSystem() throws {
        func residentKiB() throws -> Int {
            let statm = try String(contentsOfFile: "/proc/self/statm", encoding: .utf8).split(separator: " ")
            return Int(statm[1])! * Int(sysconf(Int32(_SC_PAGESIZE))) / 1024
        }
        // 200 MB in 4 KiB blocks (below the mmap threshold: they come from the heap and stay resident
        // when freed), touched so they are resident; then freed.
        var blocks: [UnsafeMutableRawPointer] = []
        for _ in 0..<51_200 {
            let block = malloc(4_096)!
            memset(block, 1, 4_096)
            blocks.append(block)
        }
        // A block above them keeps free(3) from shrinking the heap's top by itself.
        let pin = malloc(4_096)!
        defer { free(pin) }
        let full = try residentKiB()
        for block in blocks { free(block) }
        blocks.removeAll()
        let freed = try residentKiB()
        #expect(MallocArenas.trim(), "malloc_trim released nothing")
        let trimmed = try residentKiB()
        #expect(full - freed < 50_000, "free(3) alone gave back \(full - freed) KiB: the pin did not hold the heap")
        #expect(freed - trimmed > 100_000, "RSS \(full) KiB with the blocks, \(freed) KiB freed, \(trimmed) KiB trimmed")
    }
}
