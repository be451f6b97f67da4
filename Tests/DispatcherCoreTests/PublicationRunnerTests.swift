import PushTestSupport
import ServiceCore
import Synchronization
import Testing

@testable import DispatcherCore

/// `Acknowledgements` and the `PublicationRunner` its publications run in (child tasks of the
/// runner's group, not unstructured tasks).
@Suite struct PublicationRunnerTests {
    /// A publication started before a graceful shutdown runs to its end after it; one started after
    /// the runner stopped fails its request instead of being lost silently.
    @Test func gracefulShutdownLetsStartedPublicationsFinishAndRefusesLaterOnes() async throws {
        let runner = PublicationRunner()
        let shutdown = GracefulShutdown()
        let release = OneShot()
        let published = Atomic<Int>(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await runner.run(shutdown: shutdown) }
            let acks = Acknowledgements(runner)
            acks.start {
                await release.wait()
                published.add(1, ordering: .relaxed)
            }
            shutdown.trigger()
            release.fire()
            try await acks.waitForAll()
            #expect(published.load(ordering: .relaxed) == 1)
            try await group.waitForAll()  // the runner returned
        }
        let late = Acknowledgements(runner)
        late.start { published.add(1, ordering: .relaxed) }
        await #expect(throws: PublicationRunner.Stopped.self) { try await late.waitForAll() }
        #expect(published.load(ordering: .relaxed) == 1)
    }

    /// The first failed publication is the request's error; the others still run.
    @Test func theFirstErrorIsTheRequests() async throws {
        struct Refused: Error {}
        let runner = PublicationRunner()
        let shutdown = GracefulShutdown()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await runner.run(shutdown: shutdown) }
            let acks = Acknowledgements(runner)
            let ran = Atomic<Int>(0)
            acks.start { ran.add(1, ordering: .relaxed); throw Refused() }
            acks.start { ran.add(1, ordering: .relaxed) }
            await #expect(throws: Refused.self) { try await acks.waitForAll() }
            #expect(ran.load(ordering: .relaxed) == 2)
            shutdown.trigger()
            try await group.waitForAll()
        }
    }
}
