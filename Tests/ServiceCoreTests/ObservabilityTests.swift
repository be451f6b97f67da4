import Foundation
import Testing
@testable import ServiceCore

/// W3C Trace Context `traceparent` parsing (https://www.w3.org/TR/trace-context/#traceparent-header).
@Suite struct TraceParentTests {
    static let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func parsesTheSpecificationsExample() throws {
        let trace = try #require(TraceParent(Self.valid))
        #expect(trace.version == "00")
        #expect(trace.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(trace.parentID == "00f067aa0ba902b7")
        #expect(trace.flags == 1)
        #expect(trace.isSampled)
        #expect(trace.text == Self.valid)
        // Optional whitespace around a header value is not part of it.
        #expect(TraceParent(" \(Self.valid)\t")?.text == Self.valid)
        #expect(TraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")?.isSampled == false)
    }

    @Test(arguments: [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  // no flags
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff is invalid
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // version 00 is exactly 55 characters
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // wrong separator
        "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",  // field lengths shifted
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // not hex
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // later version: 56th character must be '-'
    ])
    func refusesInvalidValues(_ text: String) {
        #expect(TraceParent(text) == nil)
    }

    @Test func acceptsLaterVersionsByTheirFirstFourFields() {
        #expect(TraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") != nil)
        #expect(TraceParent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds") != nil)
    }

    @Test func randomTracesAreValidAndDistinct() {
        var seen = Set<String>()
        for _ in 0..<1000 {
            let trace = TraceParent.random()
            #expect(TraceParent(trace.text) == trace)
            #expect(trace.version == "00" && trace.isSampled)
            seen.insert(trace.traceID)
        }
        #expect(seen.count == 1000)
    }

    /// Hands out the listed words, then counts up from 1.
    struct ScriptedGenerator: RandomNumberGenerator {
        var words: [UInt64]
        var counter = UInt64(1)
        mutating func next() -> UInt64 {
            if !words.isEmpty { return words.removeFirst() }
            defer { counter += 1 }
            return counter
        }
    }

    @Test func randomTracesDrawAgainForAllZeroIdsAndPrintWordsAsHex() {
        // The first trace id (two words) and the first parent id are all zeros: both are drawn again.
        var generator = ScriptedGenerator(words: [0, 0, 0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210, 0, 0xa])
        let trace = TraceParent.random(using: &generator)
        #expect(trace.text == "00-0123456789abcdeffedcba9876543210-000000000000000a-01")
        // A trace id with one zero word is valid as it is.
        var halfZero = ScriptedGenerator(words: [0, 7, 9])
        #expect(TraceParent.random(using: &halfZero).text == "00-00000000000000000000000000000007-0000000000000009-01")
    }

    @Test func resolutionTakesTheFirstValidCandidateElseStartsATrace() {
        let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        #expect(TraceParent.resolve([Self.valid, other]).trace.text == Self.valid)
        #expect(TraceParent.resolve([nil, "", "garbage", other]) == (TraceParent(other)!, false))
        let fresh = TraceParent.resolve([nil, "not-a-trace"])
        #expect(fresh.generated)
        #expect(TraceParent(fresh.trace.text) != nil)
    }
}

@Suite struct LoggerFormatTests {
    @Test func jsonLinesAreOneParsableObjectWithEveryField() throws {
        let logger = Logger(label: "dispatcher", logLevel: .info, metadata: ["component": "kafka"], format: .json)
        let line = logger.line(.warning, "say \"hi\"\n\tnow", ["request_id": "r-1", "path": "a/b\\c", "ctl": "\u{01}"], timestamp: "2026-12-01T06:00:00.000Z")
        #expect(line.hasSuffix("}\n"))
        #expect(line.dropLast().contains("\n") == false)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(object == [
            "ts": "2026-12-01T06:00:00.000Z", "level": "warning", "logger": "dispatcher", "msg": "say \"hi\"\n\tnow",
            "component": "kafka", "request_id": "r-1", "path": "a/b\\c", "ctl": "\u{01}",
        ])
    }

    @Test func logfmtStaysTheDefaultShape() {
        let logger = Logger(label: "x", logLevel: .info, format: .logfmt)
        #expect(logger.line(.info, "hello world", ["b": "2", "a": "1"], timestamp: "T") == "ts=T level=info logger=x msg=\"hello world\" a=1 b=2\n")
    }

    @Test func secretsAreRedactedWhateverTheFormat() throws {
        let jwt = "eyJhbGciOiJFUzI1NiIsImtpZCI6IkRFVktFWTAwMDEifQ.eyJpc3MiOiJERVZURUFNMDAxIiwiaWF0IjoxfQ.c2lnbmF0dXJl"
        let pem = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----"
        for format in [Logger.Format.json, .logfmt] {
            let line = Logger(label: "t", format: format).line(.error, "bearer \(jwt)", ["key": pem, "ok": "eyJ alone is fine"], timestamp: "T")
            #expect(!line.contains("eyJhbGci"))
            #expect(!line.contains("BEGIN PRIVATE KEY"))
            #expect(line.contains("[redacted]"))
            #expect(line.contains("eyJ alone is fine"))
        }
    }

    @Test func tokensAreShortenedToTheirEnds() {
        let token = String(repeating: "ab", count: 32)
        #expect(Logger.shortened(token: token) == "abababab...abab")
        #expect(Logger.shortened(token: "0123456789abcdef0123") == "01234567...0123")
        #expect(Logger.shortened(token: "short") == "...(5)")
        #expect(!Logger.shortened(token: token).contains(token))
    }

    @Test func formatNamesParse() {
        #expect(Logger.Format(name: "JSON") == .json)
        #expect(Logger.Format(name: "logfmt") == .logfmt)
        #expect(Logger.Format(name: "xml") == nil)
    }
}

@Suite struct ProbePolicyTests {
    let kafkaOK = ReadinessInputs.KafkaClient(joined: true, assignedPartitions: 0, lastPollAge: .milliseconds(100), brokersUp: 1, statisticsAge: .seconds(1))
    let dbOK = ReadinessInputs.DatabaseCheck(succeeded: true, age: .seconds(2), detail: "1 ms")

    @Test func livenessFailsOnlyForALoopStalledPastTheLimit() {
        let policy = LivenessPolicy(maxBeatAge: .seconds(30))
        #expect(policy.evaluate([]).isPassing)
        #expect(policy.evaluate([("kafka-consumer-poll", .seconds(29)), ("http2-server-0", .seconds(5))]).isPassing)
        let wedged = policy.evaluate([("kafka-consumer-poll", .seconds(31)), ("http2-server-0", .seconds(1))])
        #expect(!wedged.isPassing)
        #expect(wedged.httpStatus == 503)
        #expect(wedged.text.contains("failing heartbeat kafka-consumer-poll: has not come round for 31.0 s (limit 30.0 s)"))
    }

    @Test func loopsSharingANameAreNumberedSoEachLineNamesOneLoop() {
        let report = LivenessPolicy(maxBeatAge: .seconds(30)).evaluate(
            [("http2-server-0", .seconds(1)), ("kafka-consumer-poll", .seconds(1)), ("http2-server-0", .seconds(31))])
        #expect(report.checks.map(\.name) == ["heartbeat http2-server-0 #1", "heartbeat kafka-consumer-poll", "heartbeat http2-server-0 #2"])
        #expect(report.text.contains("failing heartbeat http2-server-0 #2: has not come round for 31.0 s"))
    }

    @Test func readyWithZeroPartitionsAndWithAppleDown() {
        let inputs = ReadinessInputs(
            consumer: kafkaOK, producer: kafkaOK, usesDatabase: true, databaseCheck: dbOK,
            informational: [.init("apns.reachability", .failing, "503 ServiceUnavailable for 2 minutes")])
        let report = ReadinessPolicy().evaluate(inputs)
        #expect(report.isPassing)
        // Apple's troubles are shown, as info, never as a failing check.
        #expect(report.text.contains("info apns.reachability: 503 ServiceUnavailable"))
        #expect(report.text.contains("joined; 0 partitions assigned"))
    }

    @Test func eachDependencyFaultMakesItUnready() {
        let policy = ReadinessPolicy()
        func ready(_ change: (inout ReadinessInputs) -> Void) -> ProbeReport {
            var inputs = ReadinessInputs(consumer: kafkaOK, producer: kafkaOK, usesDatabase: true, databaseCheck: dbOK)
            change(&inputs)
            return policy.evaluate(inputs)
        }
        #expect(ready { _ in }.isPassing)
        do {
            let report = ready { inputs in inputs.phase = .starting }
            #expect(!report.isPassing)
        }
        do {
            let report = ready { inputs in inputs.phase = .stopping }
            #expect(!report.isPassing)
        }
        do {
            let report = ready { inputs in inputs.consumer?.joined = false }
            #expect(!report.isPassing)
        }
        do {
            let report = ready { inputs in inputs.consumer?.lastPollAge = .seconds(11) }
            #expect(!report.isPassing)
        }
        do {
            let report = ready { inputs in inputs.consumer?.brokersUp = 0 }
            #expect(!report.isPassing)
        }
        do {
            let report = ready { inputs in inputs.producer?.lastError = .init(message: "_FATAL: sequence", age: .seconds(300), isFatal: true) }
            #expect(!report.isPassing)
        }
        do {
            let report = ready { inputs in inputs.databaseCheck = nil }
            #expect(!report.isPassing)
        }
        do {
            let report = ready { inputs in inputs.databaseCheck?.succeeded = false }
            #expect(!report.isPassing)
        }
        do {
            let report = ready { inputs in inputs.databaseCheck?.age = .seconds(16) }
            #expect(!report.isPassing)
        }
        let failed = ready { inputs in inputs.databaseCheck = .init(succeeded: false, age: .seconds(1), detail: "connection refused") }
        #expect(failed.text.contains("failing postgres: last check failed 1.0 s ago: connection refused"))
    }

    @Test func allBrokersDownCountsOnlyWithoutFreshStatisticsAndWithinTheWindow() {
        let policy = ReadinessPolicy()
        var client = ReadinessInputs.KafkaClient(
            joined: true, lastPollAge: .zero, lastError: .init(message: "_ALL_BROKERS_DOWN", age: .seconds(5), isAllBrokersDown: true))
        #expect(!policy.evaluate(.init(producer: client)).isPassing)
        client.lastError?.age = .seconds(31)
        #expect(policy.evaluate(.init(producer: client)).isPassing)
        // Fresh statistics showing a broker up outweigh an older all-brokers-down report.
        client.lastError?.age = .seconds(5)
        client.brokersUp = 1
        client.statisticsAge = .seconds(1)
        #expect(policy.evaluate(.init(producer: client)).isPassing)
        // A transient error is shown but does not decide.
        client.lastError = .init(message: "_TRANSPORT: reset", age: .seconds(1))
        let report = policy.evaluate(.init(producer: client))
        #expect(report.isPassing)
        #expect(report.text.contains("last error 1.0 s ago: _TRANSPORT: reset"))
    }

    @Test func readinessStateCarriesPhaseChecksAndReaders() {
        let state = ReadinessState()
        #expect(state.inputs().phase == .starting)
        state.usesDatabase()
        state.setPhase(.running)
        #expect(!ReadinessPolicy().evaluate(state.inputs()).isPassing)  // no database check yet
        state.recordDatabaseCheck(succeeded: true, detail: "2 ms")
        state.setConsumer { ReadinessInputs.KafkaClient(joined: true, lastPollAge: .zero) }
        let report = ReadinessPolicy().evaluate(state.inputs())
        #expect(report.isPassing)
        #expect(report.checks.map(\.name) == ["service", "kafka.consumer", "postgres"])
    }

    @Test func heartbeatsAgeAndLeaveTheSetWhenRemoved() throws {
        let beats = Heartbeats()
        let beat = beats.register("loop")
        #expect(beats.snapshot().map(\.name) == ["loop"])
        Thread.sleep(forTimeInterval: 0.05)
        #expect(beat.age >= .milliseconds(50))
        beat.beat()
        #expect(beat.age < .milliseconds(50))
        beats.remove(beat)
        #expect(beats.snapshot().isEmpty)
    }
}

@Suite struct ProcessMetricsTests {
    @Test func readsThisProcessFromProc() throws {
        let rss = try #require(ProcessMetrics.residentMemoryBytes())
        #expect(rss > 1 << 20)
        // Other suites of this process open and close files meanwhile: one of a few tries sees exactly
        // the descriptor this test opened (a count that ignores /proc would never see it).
        var sawOurs = false
        for _ in 0..<20 where !sawOurs {
            let before = try #require(ProcessMetrics.openFileDescriptors())
            let fd = open("/dev/null", O_RDONLY)
            sawOurs = ProcessMetrics.openFileDescriptors() == before + 1
            close(fd)
        }
        #expect(sawOurs, "the count never moved by exactly the descriptor opened")
        let start = try #require(ProcessMetrics.startTimeSeconds())
        let now = Date().timeIntervalSince1970
        #expect(start <= now + 1 && start > now - 3600)
        let registry = MetricsRegistry()
        ProcessMetrics.register(in: registry)
        let text = registry.render()
        #expect(text.contains("# TYPE process_resident_memory_bytes gauge"))
        #expect(text.contains("# TYPE process_open_fds gauge"))
        #expect(text.contains("# TYPE process_start_time_seconds gauge"))
    }
}
