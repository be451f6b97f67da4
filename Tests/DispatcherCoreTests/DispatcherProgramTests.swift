import DispatcherCore
import Foundation
import PushTestSupport
import ServiceCore
import Testing

/// `dispatcher --check-config` and `--help` read the settings start reads (`DispatcherProgram.load`
/// through `ServiceMain`): a check that passes means start gets past its settings.
@Suite struct DispatcherProgramTests {
    /// A valid environment: a real `.p8` made by openssl, as Apple's are.
    static func goodEnvironment() async throws -> [String: String] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dispatcher-program-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let p8 = directory.appendingPathComponent("key.p8").path
        let made = try await runProgram(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p8])
        try #require(made.status == 0, "openssl: \(made.output)")
        return ["PUSH_APNS_KEY_FILE": p8, "PUSH_APNS_KEY_ID": "KEY0000001", "PUSH_APNS_TEAM_ID": "TEAM000001"]
    }

    static func unread(_ loaded: ServiceMain.Loaded) -> [String] {
        loaded.environment.checkReport(program: "dispatcher").split(separator: "\n")
            .filter { $0.contains("does not read it") }.map(String.init)
    }

    @Test func goodSettingsLoadAndNameNoVariableUnread() async throws {
        var environment = try await Self.goodEnvironment()
        for (name, value) in [("PUSH_ADMIN_PORT", "9999"), ("PUSH_ADMIN_HOST", "127.0.0.1"), ("PUSH_ADMIN_CONNECTION_LIMIT", "8"),
                              ("PUSH_ADMIN_TEST_HOOKS", "true"), ("PUSH_HEALTH_MAX_LOOP_STALL_MS", "1000"),
                              ("PUSH_READY_MAX_POLL_AGE_MS", "1000"), ("PUSH_READY_MAX_DB_CHECK_AGE_MS", "1000"),
                              ("PUSH_CANCEL_POLL_MS", "50"), ("LOG_LEVEL", "DEBUG"), ("LOG_FORMAT", "json")] {
            environment[name] = value
        }
        let loaded = DispatcherProgram.main.loadSettings(environment: environment)
        #expect(loaded.environment.errors.isEmpty, "\(loaded.environment.errors)")
        #expect(loaded.launch != nil)
        #expect(Self.unread(loaded).isEmpty, "\(Self.unread(loaded))")
    }

    @Test func adminPortOutOfRangeFailsTheCheck() async throws {
        let environment = try await Self.goodEnvironment().merging(["PUSH_ADMIN_PORT": "70000"]) { $1 }
        let loaded = DispatcherProgram.main.loadSettings(environment: environment)
        #expect(loaded.environment.errors.map(\.variable) == ["PUSH_ADMIN_PORT"])
        #expect(loaded.launch == nil)
        #expect(loaded.environment.checkExitStatus == 2)
        #expect(Self.unread(loaded).isEmpty, "\(Self.unread(loaded))")
    }

    @Test func oneBadCampaignSettingStillReadsEveryOtherVariable() async throws {
        let environment = try await Self.goodEnvironment().merging(
            ["PUSH_CAMPAIGN_POLL_MS": "0", "PUSH_CAMPAIGN_RATE_PER_APP": "fast", "PUSH_ADMIN_PORT": "x", "LOG_LEVEL": "loud"]) { $1 }
        let loaded = DispatcherProgram.main.loadSettings(environment: environment)
        #expect(Set(loaded.environment.errors.map(\.variable)) == ["PUSH_CAMPAIGN_POLL_MS", "PUSH_CAMPAIGN_RATE_PER_APP", "PUSH_ADMIN_PORT", "LOG_LEVEL"])
        // The variables read after the campaign settings are still read, so none is called unread.
        #expect(Self.unread(loaded).isEmpty, "\(Self.unread(loaded))")
        let read = Set(loaded.environment.entries.map(\.variable))
        #expect(read.isSuperset(of: ["PUSH_APNS_KEY_FILE", "PUSH_APNS_KEY_ID", "PUSH_APNS_TEAM_ID", "PUSH_PG_URL", "PUSH_ADMIN_HOST"]))
    }

    /// The cancel poll interval must be a positive number of milliseconds (docs/campaigns.md "Cancellation").
    @Test func aCancelPollIntervalThatIsNotPositiveIsNamed() async throws {
        for value in ["0", "soon", "-5"] {
            let environment = try await Self.goodEnvironment().merging(["PUSH_CANCEL_POLL_MS": value]) { $1 }
            let loaded = DispatcherProgram.main.loadSettings(environment: environment)
            #expect(loaded.environment.errors.map(\.variable) == ["PUSH_CANCEL_POLL_MS"], "\(value)")
            #expect(loaded.launch == nil)
        }
    }

    /// The in-flight budget in bytes (docs/dispatcher-engine.md "Back-pressure") is read and bounded
    /// like the other integer settings.
    @Test func theInFlightRecordBytesBudgetIsReadAndBounded() async throws {
        let good = DispatcherProgram.main.loadSettings(
            environment: try await Self.goodEnvironment().merging(["PUSH_MAX_IN_FLIGHT_RECORD_BYTES": "1048576"]) { $1 })
        #expect(good.environment.errors.isEmpty, "\(good.environment.errors)")
        #expect(Self.unread(good).isEmpty, "\(Self.unread(good))")
        for value in ["0", "lots", "2000000000000"] {
            let environment = try await Self.goodEnvironment().merging(["PUSH_MAX_IN_FLIGHT_RECORD_BYTES": value]) { $1 }
            let loaded = DispatcherProgram.main.loadSettings(environment: environment)
            #expect(loaded.environment.errors.map(\.variable) == ["PUSH_MAX_IN_FLIGHT_RECORD_BYTES"], "\(value)")
            #expect(loaded.launch == nil)
        }
    }

    @Test func aKeyFileThatIsNotAP8IsNamed() async throws {
        let directory = FileManager.default.temporaryDirectory
        let bad = directory.appendingPathComponent("not-a-key-\(UUID().uuidString).p8")
        try "hello\n".write(to: bad, atomically: true, encoding: .utf8)
        let environment = try await Self.goodEnvironment().merging(["PUSH_APNS_KEY_FILE": bad.path]) { $1 }
        let loaded = DispatcherProgram.main.loadSettings(environment: environment)
        #expect(loaded.environment.errors.map(\.variable) == ["PUSH_APNS_KEY_FILE"])
        let missing = DispatcherProgram.main.loadSettings(environment: environment.merging(["PUSH_APNS_KEY_FILE": "/nonexistent/key.p8"]) { $1 })
        #expect(missing.environment.errors.map(\.variable) == ["PUSH_APNS_KEY_FILE"])
    }

    @Test func helpPrintsTheSettingsAndExitsWithoutStarting() async throws {
        // A good environment whose Kafka and PostgreSQL do not exist: started, the dispatcher would run
        // (and retry) until stopped, so returning at once with 0 shows nothing started.
        let environment = try await Self.goodEnvironment().merging(["PUSH_KAFKA_BOOTSTRAP": "127.0.0.1:1", "PUSH_ADMIN_PORT": "0"]) { $1 }
        let started = ContinuousClock.now
        #expect(await DispatcherProgram.main.run(arguments: ["--help"], environment: environment) == 0)
        #expect(ContinuousClock.now - started < .seconds(5))
        let help = DispatcherProgram.main.helpText()
        #expect(help.hasPrefix("usage: dispatcher"))
        for name in ["PUSH_APNS_KEY_FILE", "PUSH_ADMIN_PORT [9102]", "PUSH_CAMPAIGN_POLL_MS", "LOG_LEVEL [info]", "PUSH_SHUTDOWN_GRACE_MS [30000]"] {
            #expect(help.contains(name), "\(name) missing from --help:\n\(help)")
        }
        #expect(await DispatcherProgram.main.run(arguments: ["--frobnicate"], environment: environment) == 2)
    }
}
