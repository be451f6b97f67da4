import DispatcherStatus
import PushMessages
import Testing

@testable import PushCtlCore

/// Global options anywhere on the line, `send --app` over both environments, `--send-at`, and the
/// audience count that pushctl prints before sending.
@Suite struct GlobalOptionsAndSchedulingTests {
    @Test func optionsBeforeTheCommandMoveBehindIt() throws {
        #expect(PushCtlCommand.hoistingLeadingOptions(["--bootstrap", "h:1", "--env-file=f", "send", "--app", "a"])
            == ["send", "--app", "a", "--bootstrap", "h:1", "--env-file=f"])
        #expect(PushCtlCommand.hoistingLeadingOptions(["--env-file", "f", "--help"]) == ["--env-file", "f", "--help"])
        #expect(PushCtlCommand.hoistingLeadingOptions(["--tls", "register", "--token", "t"]) == ["register", "--token", "t", "--tls"])
        let (command, rest) = try PushCtlCommand.resolve(PushCtlCommand.hoistingLeadingOptions(["--bootstrap", "h:1", "token", "show", "T"]))
        #expect(command.name == "token show")
        let parsed = try CommandLineArguments(rest, options: command.parsedOptions)
        #expect(parsed.positionals == ["T"] && parsed.value("bootstrap") == "h:1")
    }

    @Test func helpThroughAnAliasAndAMissingCommand() async {
        #expect(await PushCtl.run(["--env-file", "/nonexistent", "--help"], environment: [:]) == 0)
        #expect(await PushCtl.run(["--bootstrap", "h:1"], environment: [:]) == PushCtlExitCode.usage.rawValue)
        #expect(await PushCtl.run(["--bootstrap", "h:1", "send", "--help"], environment: [:]) == 0)
    }

    func build(_ arguments: [String]) throws -> SendRequest {
        let command = try PushCtlCommand.resolve(["send"]).0
        return try SendRequestBuilder.build(try CommandLineArguments(arguments, options: command.parsedOptions), now: 1_700_000_000_000)
    }

    @Test func anAppAudienceCoversBothEnvironmentsUnlessOneIsGiven() throws {
        let both = try build(["--app", "com.x", "--bundle", "com.x", "--title", "t"])
        guard case .audience(let audience) = both.target else { Issue.record("not an audience"); return }
        #expect(audience.environment == .unspecified)
        #expect(try AudienceQuery(both).environment == nil)
        let sandbox = try build(["--app", "com.x", "--bundle", "com.x", "--title", "t", "--app-environment", "sandbox"])
        #expect(try AudienceQuery(sandbox).environment == .sandbox)
        #expect(SendCommand.describe(both) == "app com.x, both environments")
        #expect(SendCommand.describe(sandbox) == "app com.x, sandbox")
    }

    @Test func aChannelTargetIsABroadcastOfALiveActivityUpdate() throws {
        let payload = #"{"aps":{"timestamp":1700000000,"event":"update"}}"#
        let request = try build(["--channel", "dHmp9L2t0Bc=", "--bundle", "com.x", "--environment", "production", "--payload", payload])
        guard case .channelID(let channel) = request.target else { Issue.record("not a channel"); return }
        #expect(channel == "dHmp9L2t0Bc=" && request.notification?.pushType == .liveactivity)
        #expect(request.notification?.payload == payload && request.notification?.environment == .production)
        #expect(SendCommand.describe(request) == "channel dHmp9L2t0Bc= of com.x")
        #expect(throws: CommandLineArguments.UsageError.self) {
            try build(["--channel", "c", "--token", String(repeating: "ab", count: 32), "--bundle", "com.x", "--payload", payload])
        }
    }

    @Test func audienceCountUsesThePagesConditions() throws {
        var query = AudienceQuery(bundleID: "com.x", environment: .sandbox, tokenKind: "standard")
        query.locales = ["de_DE"]
        let count = query.count()
        #expect(count.sql.hasPrefix("SELECT count(*) AS n FROM device_tokens WHERE status = 'active' AND bundle_id = $1"))
        #expect(count.sql.contains("environment = $4") && count.sql.contains("attributes->>'locale'"))
        #expect(!count.sql.contains("LIMIT"))
        #expect(count.parameters.count == query.conditions(after: nil).parameters.count)
    }

    @Test func sendAtForms() throws {
        let now: Int64 = 1_700_000_000_000
        #expect(try SendRequestBuilder.sendAt("+30", now: now) == now + 30_000)
        #expect(try SendRequestBuilder.sendAt("1700000123456", now: now) == 1_700_000_123_456)
        #expect(try SendRequestBuilder.sendAt("2026-12-03T09:00:00Z", now: now) == 1_796_288_400_000)
        #expect(try SendRequestBuilder.sendAt("2026-12-03T10:00:00.250+01:00", now: now) == 1_796_288_400_250)
        #expect(throws: CommandLineArguments.UsageError.self) { try SendRequestBuilder.sendAt("tomorrow", now: now) }
        #expect(try build(["--token", "ab", "--bundle", "com.x", "--title", "t", "--send-at", "+1.5"]).sendAtMs == 1_700_000_001_500)
    }
}

@Suite struct SettingsHintTests {
    @Test func aDefaultAddressThatFailsPointsToTheOptionTheVariableAndTheEnvFile() throws {
        let failure = PushCtlError(.unavailable, "Kafka at 127.0.0.1:9092 did not answer")
        let unset = try PushCtlSettings(environment: [:], envFile: nil)
        let hinted = unset.withSettingsHint(failure, variable: "PUSH_KAFKA_BOOTSTRAP", option: "--bootstrap")
        #expect(hinted.message.hasSuffix(
            "(PUSH_KAFKA_BOOTSTRAP is not set and --bootstrap was not given: the default address was used; for the local stack pass --env-file $PUSH_VAR_DIR/stack.env)"))
        let set = try PushCtlSettings(environment: ["PUSH_KAFKA_BOOTSTRAP": "k:9092"], envFile: nil)
        #expect(set.withSettingsHint(failure, variable: "PUSH_KAFKA_BOOTSTRAP", option: "--bootstrap").message == failure.message)
    }
}
