import Foundation
import Testing

@testable import ServiceCore

@Suite struct EnvironmentConfigCheckTests {
    @Test func collectingModeNamesEveryBadVariableAndReturnsDefaults() throws {
        let env = EnvironmentConfig(
            ["PUSH_A": "x", "PUSH_B": "-3", "PUSH_C": "maybe", "PUSH_D": "sideways", "PUSH_OK": "7"], collectingErrors: true)
        #expect(try env.int("PUSH_A", default: 1) == 1)
        #expect(try env.milliseconds("PUSH_B", default: .seconds(2)) == .seconds(2))
        #expect(try env.bool("PUSH_C", default: true) == true)
        #expect(try env.choice("PUSH_D", default: 0, ["up": 1, "down": 2]) == 0)
        #expect(try env.required("PUSH_MISSING") == "")
        #expect(try env.int("PUSH_OK", default: 1, in: 1...10) == 7)
        #expect(env.errors.map(\.variable) == ["PUSH_A", "PUSH_B", "PUSH_C", "PUSH_D", "PUSH_MISSING"])
        #expect(env.checkExitStatus == 2)
        let report = env.checkReport(program: "test")
        for name in ["PUSH_A", "PUSH_B", "PUSH_C", "PUSH_D", "PUSH_MISSING"] {
            #expect(report.contains("error: \(name):"), "\(name) not named in:\n\(report)")
        }
        #expect(report.contains("expected up or down"))
        #expect(try env.choice("PUSH_E", default: 2, ["up": 1, "down": 2]) == 2)
        #expect(env.checkReport(program: "test").contains("PUSH_E") && env.checkReport(program: "test").contains("= down  (default)"))
    }

    @Test func throwingModeStopsAtTheFirstBadVariable() {
        let env = EnvironmentConfig(["PUSH_A": "x"])
        #expect(throws: EnvironmentConfig.Error.self) { try env.int("PUSH_A", default: 1) }
        #expect(throws: EnvironmentConfig.Error.self) { try env.fail("PUSH_B", "bad") }
        #expect(env.errors.isEmpty)
    }

    @Test func reportShowsEffectiveValuesAndDefaultsWithSecretsMasked() throws {
        let env = EnvironmentConfig(
            [
                "PUSH_PG_URL": "postgresql://push:hunter2@db:5432/push", "PUSH_KAFKA_SASL_PASSWORD_FILE": "/run/secrets/kafka",
                "PUSH_APNS_KEY": "-----BEGIN PRIVATE KEY-----abc", "PUSH_KAFKA_PROPERTY_SASL_PASSWORD": "s3cret",
                "PUSH_TYPO_VARIABLE": "1", "PUSH_VAR_DIR": "/var/tmp/x",
            ], collectingErrors: true)
        _ = env.string("PUSH_PG_URL")
        _ = env.string("PUSH_KAFKA_SASL_PASSWORD_FILE")
        _ = env.string("PUSH_APNS_KEY")
        _ = env.variables(withPrefix: "PUSH_KAFKA_PROPERTY_")
        _ = try env.int("PUSH_PORT", default: 50051)
        _ = env.string("PUSH_CA_FILE")
        let report = env.checkReport(program: "test")
        #expect(!report.contains("hunter2"))
        #expect(!report.contains("s3cret"))
        #expect(!report.contains("BEGIN PRIVATE KEY"))
        #expect(report.contains("postgresql://push:********@db:5432/push"))
        #expect(report.contains("/run/secrets/kafka"))
        #expect(report.contains("PUSH_PORT") && report.contains("50051  (default)"))
        #expect(report.contains("PUSH_CA_FILE") && report.contains("(unset)"))
        #expect(report.contains("warning: PUSH_TYPO_VARIABLE is set"))
        #expect(!report.contains("PUSH_VAR_DIR"))
        #expect(report.hasSuffix("configuration OK"))
        #expect(env.checkExitStatus == 0)
    }

    @Test func warningsArePrintedOnceAndDoNotFailTheCheck() throws {
        let env = EnvironmentConfig(["PUSH_A": "1"], collectingErrors: true)
        _ = try env.int("PUSH_A", default: 0)
        env.warn("PUSH_A", "is valid but probably not meant")
        env.warn("PUSH_A", "is valid but probably not meant")
        #expect(env.warnings.map(\.problem) == ["is valid but probably not meant"])
        let report = env.checkReport(program: "test")
        #expect(report.contains("warning: PUSH_A: is valid but probably not meant"))
        #expect(report.hasSuffix("configuration OK") && env.checkExitStatus == 0)
        // Not collecting errors: a warning never throws either.
        let strict = EnvironmentConfig([:])
        strict.warn("PUSH_B", "odd")
        #expect(strict.warnings.count == 1 && strict.errors.isEmpty)
    }

    @Test func masking() {
        #expect(EnvironmentConfig.mask("PUSH_PG_URL", "host=db user=push password=pw dbname=push") == "host=db user=push password=******** dbname=push")
        #expect(EnvironmentConfig.mask("PUSH_PG_URL", "postgresql://push@db/push?password=pw&sslmode=require") == "postgresql://push@db/push?password=********&sslmode=require")
        #expect(EnvironmentConfig.mask("PUSH_PG_URL", "postgresql://push@db/push") == "postgresql://push@db/push")
        #expect(EnvironmentConfig.mask("PUSH_API_KEYS", "pk_a_b") == "********")
        #expect(EnvironmentConfig.mask("PUSH_PG_PASSWORD_FILE", "/run/pw") == "/run/pw")
    }

    @Test func fileContentsDropsTheTrailingNewlineAndNamesAnUnreadableFile() throws {
        let path = "/tmp/envcheck-\(UInt64.random(in: 0...UInt64.max))"
        try "pw-1\n".write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let env = EnvironmentConfig(["PUSH_PW_FILE": path, "PUSH_BAD_FILE": "/nonexistent/pw"], collectingErrors: true)
        #expect(try env.fileContents("PUSH_PW_FILE") == "pw-1")
        #expect(try env.fileContents("PUSH_BAD_FILE") == nil)
        #expect(try env.fileContents("PUSH_NONE_FILE") == nil)
        #expect(env.errors.map(\.variable) == ["PUSH_BAD_FILE"])
    }
}
