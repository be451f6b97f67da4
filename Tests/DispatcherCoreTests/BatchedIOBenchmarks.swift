import Foundation
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// Throughput of the batched paths against one statement per event or row. Prints the numbers and
/// asserts no timing; runs only with `PUSH_BENCH=1` (it takes a minute or more on a small machine):
/// `PUSH_BENCH=1 swift test --skip-build --disable-xctest --filter BatchedIOBenchmarks`.
@Suite(.testDatabase, .serialized, .timeLimit(.minutes(20)),
       .enabled(if: ProcessInfo.processInfo.environment["PUSH_BENCH"] == "1"))
struct BatchedIOBenchmarks {
    /// 50,000 token events: 70% new tokens with their own installation, 20% repeated tokens (a newer
    /// registration or an unregistration, sometimes older than the last event), 10% new tokens for an
    /// existing installation (replacements).
    static func tokenEvents(count: Int, seed: UInt64) -> [TokenEvent] {
        var random = SplitMix64(state: seed)
        var tokens: [String] = [], installations: [String] = []
        var events: [TokenEvent] = []
        events.reserveCapacity(count)
        for i in 0..<count {
            let time = Int64(1_000 + i) + Int64.random(in: -50...0, using: &random)
            let roll = Int.random(in: 0..<100, using: &random)
            if roll < 20, !tokens.isEmpty {
                let token = tokens.randomElement(using: &random)!
                if roll < 5 {
                    events.append(TokenStoreTests.unregistered(token, at: time))
                } else {
                    events.append(TokenStoreTests.registered(token, at: time, user: "u\(i % 1000)"))
                }
            } else if roll < 30, !installations.isEmpty {
                let token = TokenStoreTests.token(using: &random)
                tokens.append(token)
                events.append(TokenStoreTests.registered(token, at: time, user: "u\(i % 1000)", installation: installations.randomElement(using: &random)!))
            } else {
                let token = TokenStoreTests.token(using: &random), installation = "inst-\(i)"
                tokens.append(token)
                installations.append(installation)
                events.append(TokenStoreTests.registered(token, at: time, user: "u\(i % 1000)", installation: installation))
            }
        }
        return events
    }

    @Test func tokenEventsBatchedVersusOneByOne() async throws {
        let events = Self.tokenEvents(count: 50_000, seed: 42)
        let single = try await schemaPool("bench_single"), batched = try await schemaPool("bench_batched")
        let singleStore = TokenStore(pool: single), batchedStore = TokenStore(pool: batched)
        try await singleStore.migrate()
        try await batchedStore.migrate()
        let clock = ContinuousClock()

        var start = clock.now
        var batchedChanged = 0, layers = 0
        for offset in stride(from: 0, to: events.count, by: 500) {
            let batch = Array(events[offset..<min(events.count, offset + 500)])
            layers += TokenEventBatch(batch).layers.count
            batchedChanged += try await batchedStore.apply(batch)
        }
        let batchedTime = clock.now - start

        start = clock.now
        var singleChanged = 0
        for event in events where try await singleStore.apply(event) { singleChanged += 1 }
        let singleTime = clock.now - start

        let equal = try await tokenRows(single) == tokenRows(batched)
        print(String(format: "token events: %d events; batches of 500 (%d layers): %.0f events/s (%.2f s); one by one: %.0f events/s (%.2f s); speed-up %.1fx; changed %d/%d; tables equal: %@",
                     events.count, layers, Double(events.count) / batchedTime.seconds, batchedTime.seconds,
                     Double(events.count) / singleTime.seconds, singleTime.seconds, singleTime.seconds / batchedTime.seconds,
                     batchedChanged, singleChanged, equal ? "yes" : "NO"))
        #expect(equal && batchedChanged == singleChanged)
        await single.close()
        await batched.close()
    }

    @Test func sendLogBatchedVersusOneByOne() async throws {
        let pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 8))
        try await pool.start()
        let store = TokenStore(pool: pool)
        try await store.migrate()
        let rows = 20_000
        let event = [UInt8](repeating: 0x5a, count: 200)
        func run(_ label: String, concurrency: Int, _ body: @escaping @Sendable (DeliveryReport) async throws -> Void) async throws -> Double {
            let clock = ContinuousClock()
            let start = clock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<concurrency {
                    group.addTask {
                        for i in stride(from: worker, to: rows, by: concurrency) {
                            try await body(SendLogWriterTests.report("\(label)-\(i / 50)", "token-\(i)"))
                        }
                    }
                }
                try await group.waitForAll()
            }
            return Double(rows) / (clock.now - start).seconds
        }
        for concurrency in [200, 2_000] {
            let writer = store.makeSendLogWriter()
            let batched = try await whileRunning(writer) {
                try await run("batched-\(concurrency)", concurrency: concurrency) { _ = try await writer.record($0, event: event) }
            }
            let single = try await run("single-\(concurrency)", concurrency: concurrency) { try await store.recordOutcome($0, event: event) }
            print(String(format: "send_log: %d rows of 200 bytes from %d concurrent tasks, pool of 8: batched %.0f rows/s; one by one %.0f rows/s; speed-up %.1fx",
                         rows, concurrency, batched, single, batched / single))
        }
        await pool.close()
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

extension TokenStoreTests {
    static func token(using random: inout some RandomNumberGenerator) -> String {
        (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined()
    }
}
