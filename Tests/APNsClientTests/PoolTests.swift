import APNs
import APNsSimulator
import Foundation
import ProtobufCodec
import PushTestSupport
import HTTP2
import ServiceCore
import Synchronization
import Testing

/// The pool against the simulator's faults: GOAWAY under load, silent streams, drops, a stream
/// limit that falls to 1 and rises again, back-pressure, staggered opens, PINGs, and three hours of
/// provider tokens on an injected clock.
@Suite(.serialized, .timeLimit(.minutes(1))) struct PoolTests {
    /// With answers delayed a little, and answered at once (the server then often has no stream open
    /// when it sends GOAWAY and closes while the client's next streams are on the wire). The reset
    /// that a close without lingering caused there shows across processes, not in one: the
    /// full-size fault matrix's `goaway` row catches it (Apple ×2 must be 0).
    @Test(arguments: [false, true]) func goAwayUnderLoadLosesNothingAndReportsNoRejection(answerAtOnce: Bool) async throws {
        var faults = APNsSimulatorFaults()
        faults.goAway = .init(afterStreams: answerAtOnce ? 500 : 150)
        if !answerAtOnce { faults.latency = .init(minimum: .milliseconds(1), maximum: .milliseconds(5)) }
        faults.maxConcurrentStreams = answerAtOnce ? 1_000 : 100
        try await withSimulator(faults: faults, configure: { $0.recordLimit = 100_000 }) { harness in
            var configuration = harness.configuration(connections: answerAtOnce ? 4 : 2)
            configuration.requestTimeout = .seconds(10)
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            let count = answerAtOnce ? 10_000 : 2_000
            let results = await sendAll(client, (0..<count).map { alert($0) })
            var statuses: [Int: Int] = [:]
            for result in results {
                switch result {
                case .success(let response): statuses[response.status, default: 0] += 1
                case .failure(let error): Issue.record("send failed: \(error)")
                }
            }
            #expect(statuses == [200: count])
            let goAways = harness.simulator.counters()["goaway"] ?? 0
            #expect(goAways >= 5, "the simulator sent GOAWAY \(goAways) times")
            #expect(client.metrics["goaways"] >= 5)
            #expect(client.metrics["connections_opened"] >= 6)
            // Exactly one accepted delivery per notification: nothing lost, nothing doubled.
            let delivered = harness.simulator.receivedRequests().filter { $0.status == 200 }.map(\.path)
            #expect(delivered.count == count)
            #expect(Set(delivered).count == count)
            // (A timed-out stream may be processed and sent again; none here, with a 10 s timeout.)
            #expect(client.metrics["timeouts"] == 0)
            #expect(client.metrics["unprocessed_resends"] > 0, "streams above last-stream-id were sent again")
        }
    }

    @Test func aStreamThatNeverAnswersIsResetAndRetried() async throws {
        var faults = APNsSimulatorFaults()
        faults.unansweredShare = 1
        try await withSimulator(faults: faults) { harness in
            var configuration = harness.configuration()
            configuration.requestTimeout = .milliseconds(300)
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            let clear = Task {
                while harness.simulator.counters()["unanswered"] == nil { try await Task.sleep(for: .milliseconds(5)) }
                harness.simulator.setFaults(APNsSimulatorFaults())
            }
            let response = try await client.send(alert(1), environment: .production)
            try await clear.value
            #expect(response.status == 200 && response.attempts == 2)
            #expect(client.metrics["timeouts"] == 1)
            let records = harness.simulator.receivedRequests()
            #expect(records.map(\.fault) == ["unanswered", nil])
            // The untrusted connection allows one stream: the retry on the same connection shows the
            // silent stream was reset and its slot freed.
            #expect(Set(records.map(\.connectionID)).count == 1)
        }
    }

    @Test func aDroppedConnectionResendsWhatWasUnanswered() async throws {
        var faults = APNsSimulatorFaults()
        faults.dropAfterStreams = 40
        faults.latency = .init(minimum: .milliseconds(20), maximum: .milliseconds(20))
        try await withSimulator(faults: faults) { harness in
            let client = try harness.tokenClient(harness.configuration(connections: 2))
            harness.shutdownAtEnd(client)
            let clear = Task {
                while harness.simulator.counters()["dropped"] == nil { try await Task.sleep(for: .milliseconds(2)) }
                harness.simulator.setFaults(APNsSimulatorFaults())
            }
            let results = await sendAll(client, (0..<300).map { alert($0) })
            try await clear.value
            let responses = try results.map { try $0.get() }
            #expect(responses.allSatisfy { $0.status == 200 })
            #expect(responses.contains { $0.attempts > 1 }, "requests in flight at the drop were sent again")
            #expect(client.metrics["connection_errors"] >= 1)
            #expect(harness.simulator.counters()["dropped"] ?? 0 >= 1)
            let delivered = harness.simulator.receivedRequests().filter { $0.status == 200 }.map(\.path)
            #expect(Set(delivered).count == 300)
        }
    }

    @Test func aStreamLimitThatFallsToOneAndRisesAgainIsObeyed() async throws {
        var faults = APNsSimulatorFaults()
        faults.maxConcurrentStreams = 50
        faults.latency = .init(minimum: .milliseconds(20), maximum: .milliseconds(20))
        faults.maxConcurrentStreamsSchedule = [.init(after: .milliseconds(400), value: 1), .init(after: .milliseconds(1400), value: 50)]
        try await withSimulator(faults: faults) { harness in
            let client = try harness.tokenClient()
            harness.shutdownAtEnd(client)
            let clock = ContinuousClock()
            let start = clock.now
            let completions = Completions()
            _ = try await client.send(alert(0), environment: .production)  // starts the schedule
            let stop = start + .milliseconds(2000)
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<60 {
                    group.addTask {
                        var index = 0
                        while clock.now < stop {
                            index += 1
                            if let response = try? await client.send(alert(worker * 10_000 + index), environment: .production), response.status == 200 {
                                let at = start.duration(to: clock.now)
                                completions.append(at)
                            }
                        }
                    }
                }
            }
            let times = completions.all
            func rate(_ from: Int, _ to: Int) -> Double {
                Double(times.filter { $0 >= .milliseconds(from) && $0 < .milliseconds(to) }.count) / (Double(to - from) / 1000)
            }
            let before = rate(100, 380), during = rate(700, 1350), after = rate(1650, 1950)
            // 50 streams × 20 ms ≈ 2,500/s; 1 stream × 20 ms ≈ 50/s.
            #expect(during < 80, "at most one stream while the limit is 1: \(during)/s")
            #expect(before > 500 && after > 500, "before \(before)/s, after \(after)/s")
            // Exceeding the limit gets streams refused (RST_STREAM REFUSED_STREAM). At most the
            // requests already written when the SETTINGS arrived can be (an HTTP/2 race, RFC 9113
            // §5.1.2); they are resent, never failed. How many were written in that window depends on
            // the scheduling: 0 to 2 on a quiet machine, 4 and 5 seen in a loaded fresh-clone CI run
            // (about one run in ten); a client ignoring the limit would have dozens refused.
            #expect(client.metrics["unprocessed_resends"] <= 10)
            #expect(client.metrics["retries"] == 0)
        }
    }

    @Test func aNewTokenConnectionSendsOneRequestBeforeFanningOut() async throws {
        var faults = APNsSimulatorFaults()
        faults.latency = .init(minimum: .milliseconds(150), maximum: .milliseconds(150))
        // The server announces 100 streams from the start: only our own rule holds the others back.
        try await withSimulator(faults: faults, configure: { $0.initialMaxConcurrentStreams = 100 }) { harness in
            let client = try harness.tokenClient()
            harness.shutdownAtEnd(client)
            let clock = ContinuousClock()
            let start = clock.now
            let results = await sendAll(client, (0..<20).map { alert($0) })
            let elapsed = start.duration(to: clock.now)
            #expect(results.allSatisfy { (try? $0.get().status) == 200 })
            // One round trip for the first request, then one for the 19 others in parallel.
            #expect(elapsed >= .milliseconds(290), "the others waited for the first answer: \(elapsed)")
            #expect(elapsed < .milliseconds(900), "then fanned out: \(elapsed)")
            #expect(client.metrics["unprocessed_resends"] == 0)
        }
    }

    @Test func waitingCallersAreBoundedBackPressure() async throws {
        var faults = APNsSimulatorFaults()
        faults.maxConcurrentStreams = 5
        faults.latency = .init(minimum: .milliseconds(400), maximum: .milliseconds(400))
        try await withSimulator(faults: faults) { harness in
            var configuration = harness.configuration()
            configuration.maxQueuedRequests = 10
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            _ = try await client.send(alert(0), environment: .production)
            try await Task.sleep(for: .milliseconds(50))  // SETTINGS raising the limit to 5 arrives
            let results = await sendAll(client, (1...40).map { alert($0) })
            let delivered = results.filter { (try? $0.get().status) == 200 }.count
            let refused = results.filter {
                if case .failure(let error as APNsError) = $0 { return error.code == .tooManyQueuedRequests }
                return false
            }.count
            #expect(delivered == 15, "5 streams + 10 waiting")
            #expect(refused == 25)
            #expect(client.metrics["queue_full"] == 25)
        }
    }

    @Test func anOptionalPerConnectionRateCapSpacesRequests() async throws {
        try await withSimulator { harness in
            var configuration = harness.configuration()
            configuration.maxRequestsPerSecondPerConnection = 20
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            let clock = ContinuousClock()
            let start = clock.now
            let results = await sendAll(client, (0..<30).map { alert($0) })
            let elapsed = start.duration(to: clock.now)
            #expect(results.allSatisfy { (try? $0.get().status) == 200 })
            // One token to start with, then 20 per second: 29 more take about 1.45 s.
            #expect(elapsed >= .milliseconds(1300) && elapsed < .seconds(4), "\(elapsed)")
        }
    }

    @Test func connectionsOpenStaggeredEachAfterItsOwnLookupAndIdleOnesArePinged() async throws {
        try await withSimulator { harness in
            var configuration = harness.configuration(connections: 3)
            configuration.connectStagger = .milliseconds(300)
            configuration.idlePingInterval = .milliseconds(200)
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            _ = try await client.send(alert(0), environment: .production)
            #expect(client.metrics["connections_opened"] == 1)
            try await waitFor(deadline: .seconds(10), "three connections") { client.metrics["connections_opened"] == 3 }
            try await waitFor(deadline: .seconds(10), "three pings") { client.metrics["pings"] >= 3 }
            #expect(client.metrics["dns_lookups"] == 3, "one uncached look-up per connection")
            #expect(client.metrics["pings"] >= 3)
            #expect(client.metrics["ping_failures"] == 0)

            // A connection the server drops while idle is replaced; sends keep working on the first try.
            let dropped = try await dropAll(harness)
            #expect(dropped >= 1)
            try await Task.sleep(for: .milliseconds(100))
            for index in 1...5 {
                let response = try await client.send(alert(index), environment: .production)
                #expect(response.status == 200 && response.attempts == 1)
            }
            #expect(client.metrics["connections_opened"] >= 4)
        }
    }

    @Test func aPINGThatIsNeverAnsweredReplacesTheDeadIdleConnection() async throws {
        try await withSimulator { harness in
            let portFile = FileManager.default.temporaryDirectory.appendingPathComponent("proxy-\(UUID().uuidString).port").path
            let proxy = Process()
            proxy.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            proxy.arguments = ["python3", pythonDirectory.appendingPathComponent("freezing_proxy.py").path,
                               "\(harness.simulator.productionPort)", portFile]
            proxy.standardOutput = FileHandle.nullDevice
            proxy.standardError = FileHandle.nullDevice
            try proxy.run()
            defer { kill(proxy.processIdentifier, SIGKILL) }
            var port: Int?
            for _ in 0..<200 where port == nil {
                port = (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap { Int($0) }
                if port == nil { try await Task.sleep(for: .milliseconds(20)) }
            }
            let proxyPort = try #require(port, "freezing_proxy.py did not start")

            var configuration = harness.configuration()
            configuration.production = .init(host: "127.0.0.1", port: proxyPort)
            configuration.idlePingInterval = .milliseconds(200)
            configuration.pingTimeout = .milliseconds(300)
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            #expect(try await client.send(alert(1), environment: .production).status == 200)
            kill(proxy.processIdentifier, SIGUSR1)  // the connection goes silent, stays open
            for _ in 0..<100 where client.metrics["ping_failures"] == 0 { try await Task.sleep(for: .milliseconds(20)) }
            #expect(client.metrics["ping_failures"] >= 1)
            try await Task.sleep(for: .milliseconds(100))
            let response = try await client.send(alert(2), environment: .production)
            #expect(response.status == 200 && response.attempts == 1, "sent on the replacement connection")
            #expect(client.metrics["connections_opened"] >= 2)
        }
    }

    /// Drops every simulator connection through the admin API (`POST /admin/connections/drop`).
    private func dropAll(_ harness: Harness) async throws -> Int {
        let connection = try await HTTP2Connection.connect(host: "127.0.0.1", port: harness.simulator.adminPort!)
        return try await withAsyncCleanup {
            let response = try await connection.send(HTTP2Request(method: "POST", path: "/admin/connections/drop", body: Array("{}".utf8)))
            guard response.status == 200 else { throw TestFailure("drop: \(response.status) \(String(decoding: response.body, as: UTF8.self))") }
            let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
            return (object?["connections"] as? [Any])?.count ?? 0
        } cleanup: {
            await connection.close()
        }
    }

    @Test func threeHoursOfProviderTokensNoneExpiredNoneOverRefreshed() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient(harness.configuration(connections: 3))
            harness.shutdownAtEnd(client)
            var index = 0
            for _ in 0..<180 {  // one step per minute of injected time
                let results = await sendAll(client, (0..<6).map { _ in
                    index += 1
                    return alert(index)
                })
                for result in results {
                    let response = try result.get()
                    #expect(response.status == 200, "\(response.reason?.rawValue ?? "") at minute \(index / 6)")
                }
                harness.clock.advance(by: .seconds(60))
            }
            #expect(client.metrics["expired_provider_tokens"] == 0)
            #expect(client.metrics["provider_token_updates_refused"] == 0)
            let records = harness.simulator.receivedRequests()
            #expect(records.count == 1080)
            var byConnection: [UInt64: [(at: Int64, iat: Int64)]] = [:]
            for record in records {
                let iat = try #require(record.jwt?.claims["iat"]?.integerValue)
                byConnection[record.connectionID, default: []].append((record.receivedAtMilliseconds / 1000, iat))
            }
            #expect(byConnection.count == 3, "the same three connections for three hours")
            var distinct = Set<Int64>()
            for (connection, uses) in byConnection {
                var installedAt: Int64?
                var current: Int64?
                for use in uses.sorted(by: { $0.at < $1.at }) {
                    distinct.insert(use.iat)
                    #expect(use.at - use.iat <= 3600, "connection \(connection) sent a JWT \(use.at - use.iat) s old")
                    if use.iat != current {
                        if let installedAt {
                            #expect(use.at - installedAt >= 20 * 60, "connection \(connection) changed its JWT after \(use.at - installedAt) s")
                        }
                        installedAt = use.at
                        current = use.iat
                    }
                }
            }
            // Shared: about one JWT per 20–60 minutes for all connections, not one per connection.
            #expect(distinct.count >= 3 && distinct.count <= 9, "\(distinct.count) JWTs in three hours")
        }
    }
}

final class Completions: Sendable {
    private let times = Mutex<[Duration]>([])
    func append(_ time: Duration) { times.withLock { $0.append(time) } }
    var all: [Duration] { times.withLock { $0 } }
}
