import ServiceCore
import Testing

@testable import HTTP2

/// The limit decisions of docs/http2-server-limits.md as values, without sockets or clocks
/// (times are nanoseconds given by the test).
@Suite struct HTTP2ServerLimitsTests {
    static let second: UInt64 = 1_000_000_000

    @Test func headerListCountsNameValueAnd32PerField() {
        var budget = HeaderListBudget(limit: 100)
        var fits = [budget.add(nameLength: 4, valueLength: 30)]   // 66
        fits.append(budget.add(nameLength: 1, valueLength: 1))    // 100: still within
        #expect(fits == [true, true] && !budget.exceeded)
        let over = budget.add(nameLength: 0, valueLength: 0)      // 132
        #expect(!over && budget.exceeded)
        // Once over, it stays over (and stops counting: a bomb cannot overflow it).
        var later: [Bool] = []
        for _ in 0..<1_000 { later.append(budget.add(nameLength: 4_096, valueLength: 4_096)) }
        #expect(!later.contains(true) && budget.used == 132)
        budget.restart()
        let fresh = budget.add(nameLength: 10, valueLength: 10)
        #expect(fresh && budget.used == 52)
    }

    @Test func aBodyProgressesOnlyByTheMinimumAmount() {
        var progress = RequestBodyProgress(start: 0)
        let timeout = 10 * Self.second
        #expect(progress.deadline(timeout: timeout) == timeout)
        // One byte a second for 9 seconds: no progress, the deadline stays.
        for second in 1...9 { progress.received(1, now: UInt64(second) * Self.second, minimumBytes: 1_024) }
        #expect(progress.deadline(timeout: timeout) == timeout)
        // The bytes add up: 9 + 1,015 reaches the minimum at second 9.5.
        progress.received(1_015, now: 9 * Self.second + Self.second / 2, minimumBytes: 1_024)
        #expect(progress.deadline(timeout: timeout) == 19 * Self.second + Self.second / 2)
        #expect(progress.bytesSinceMark == 0)
    }

    let timeouts = ConnectionTimeouts(handshake: 5 * second, idle: 60 * second, requestBody: 10 * second, minimumProgressBytes: 1_024)

    func decide(now: UInt64, handshakeStart: UInt64? = nil, idleSince: UInt64? = nil, bodies: [(streamID: Int32, progress: RequestBodyProgress)] = []) -> ConnectionDeadlines {
        ConnectionDeadlines.decide(now: now, timeouts: timeouts, handshakeStart: handshakeStart, idleSince: idleSince, bodies: bodies)
    }

    @Test func handshakeTimeoutWinsWhileHandshaking() {
        #expect(decide(now: 4 * Self.second, handshakeStart: 0, idleSince: 0) == ConnectionDeadlines(close: nil, next: 5 * Self.second))
        #expect(decide(now: 5 * Self.second, handshakeStart: 0, idleSince: 0).close == .handshakeTimeout)
    }

    @Test func idleConnectionsCloseAfterTheIdleTimeout() {
        #expect(decide(now: 59 * Self.second, idleSince: 0) == ConnectionDeadlines(close: nil, next: 60 * Self.second))
        #expect(decide(now: 60 * Self.second, idleSince: 0).close == .idleTimeout)
        // Busy (idleSince nil) with no body arriving: nothing to time.
        #expect(decide(now: 1_000 * Self.second) == ConnectionDeadlines())
    }

    @Test func stalledBodiesAreListedAndTheNextDeadlineIsTheEarliestOther() {
        var moving = RequestBodyProgress(start: 0)
        moving.received(2_048, now: 8 * Self.second, minimumBytes: 1_024)
        let stalled = RequestBodyProgress(start: 0)
        let later = RequestBodyProgress(start: 5 * Self.second)
        let decision = decide(now: 10 * Self.second, bodies: [(1, moving), (3, stalled), (5, later)])
        #expect(decision.close == nil)
        #expect(decision.stalledStreams == [3])
        #expect(decision.next == 15 * Self.second)
    }

    @Test func evictionTakesTheLongestIdleNeverABusyOrClosingOne() {
        typealias Candidate = ConnectionEviction.Candidate
        #expect(ConnectionEviction.victim(among: [Candidate]()) == nil)
        #expect(ConnectionEviction.victim(among: [Candidate(id: 1, idleSince: nil, closing: false)]) == nil)
        let candidates = [
            Candidate(id: 1, idleSince: nil, closing: false),   // busy
            Candidate(id: 2, idleSince: 50, closing: false),
            Candidate(id: 3, idleSince: 10, closing: true),     // already closing
            Candidate(id: 4, idleSince: 20, closing: false),    // longest idle
            Candidate(id: 5, idleSince: 20, closing: false),    // tie: the lower id goes
        ]
        #expect(ConnectionEviction.victim(among: candidates) == 4)
    }

    @Test func limitsAreValidatedAgainstTheSettings() throws {
        try HTTP2ServerLimits().validate(settings: .server)
        var limits = HTTP2ServerLimits()
        // The window opened leaves room for the frame that passes the body limit (a window of exactly
        // the limit would stall such a body instead of refusing it).
        #expect(limits.connectionWindow(for: .server) == (1 << 20) + (16 << 10))
        limits.maxRequestBodyBytes = 10_000
        #expect(limits.connectionWindow(for: .server) == 1 << 20)
        limits.maxRequestBodyBytes = Int(HTTP2Settings.maxWindowSize)
        #expect(throws: HTTP2Error.self) { try limits.validate(settings: .server) }
        limits = HTTP2ServerLimits()
        limits.idleTimeout = .zero
        #expect(throws: HTTP2Error.self) { try limits.validate(settings: .server) }
        limits = HTTP2ServerLimits()
        limits.maxConnections = 0
        #expect(throws: HTTP2Error.self) { try limits.validate(settings: .server) }
        var settings = HTTP2Settings.server
        settings.maxFrameSize = 1_000
        #expect(throws: HTTP2Error.self) { try HTTP2ServerLimits().validate(settings: settings) }
    }

    @Test func environmentOverridesAndNamesTheBadVariable() throws {
        var limits = HTTP2ServerLimits()
        var settings = HTTP2Settings.server
        try HTTP2ServerLimits.apply(environment: EnvironmentConfig([
            "PUSH_HTTP2_MAX_HEADER_LIST_BYTES": "8192", "PUSH_HTTP2_MAX_CONNECTIONS": "50", "PUSH_HTTP2_IDLE_TIMEOUT_MS": "1500",
            "PUSH_HTTP2_HANDSHAKE_TIMEOUT_MS": "700", "PUSH_HTTP2_REQUEST_BODY_TIMEOUT_MS": "900",
            "PUSH_HTTP2_REQUEST_BODY_MIN_PROGRESS_BYTES": "10", "PUSH_HTTP2_MAX_CONCURRENT_STREAMS": "20",
            "PUSH_HTTP2_STREAM_WINDOW_BYTES": "32768", "PUSH_HTTP2_CONNECTION_WINDOW_BYTES": "262144",
        ]), to: &limits, settings: &settings)
        #expect(limits.maxHeaderListBytes == 8_192 && settings.maxHeaderListSize == 8_192)
        #expect(limits.maxConnections == 50)
        #expect(limits.idleTimeout == .milliseconds(1_500) && limits.handshakeTimeout == .milliseconds(700))
        #expect(limits.requestBodyTimeout == .milliseconds(900) && limits.requestBodyMinimumProgressBytes == 10)
        #expect(settings.maxConcurrentStreams == 20 && settings.initialWindowSize == 32_768 && settings.connectionWindowSize == 262_144)
        #expect(limits.connectionWindow(for: settings) == (1 << 20) + (16 << 10), "room for the 1 MiB body limit")
        try limits.validate(settings: settings)

        for (name, value) in [("PUSH_HTTP2_MAX_CONNECTIONS", "0"), ("PUSH_HTTP2_IDLE_TIMEOUT_MS", "0"), ("PUSH_HTTP2_MAX_HEADER_LIST_BYTES", "lots"),
                              ("PUSH_HTTP2_CONNECTION_WINDOW_BYTES", "3000000000")] {
            var limits = HTTP2ServerLimits()
            var settings = HTTP2Settings.server
            let error = #expect(throws: EnvironmentConfig.Error.self) {
                try HTTP2ServerLimits.apply(environment: EnvironmentConfig([name: value]), to: &limits, settings: &settings)
            }
            #expect(error?.variable == name)
        }
    }

    @Test func logLinesArePacedPerKeyWithTheCountHeldBack() {
        var limiter = LogRateLimiter(interval: .seconds(10))
        let start = ContinuousClock.now
        let answers = [
            limiter.admit("a", now: start), limiter.admit("a", now: start + .seconds(1)), limiter.admit("a", now: start + .seconds(2)),
            limiter.admit("b", now: start + .seconds(2)), limiter.admit("a", now: start + .seconds(10)), limiter.admit("a", now: start + .seconds(11)),
        ]
        #expect(answers == [0, nil, nil, 0, 2, nil])
    }
}
