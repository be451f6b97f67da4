import Testing

@testable import ServiceCore

@Suite struct EnvironmentConfigRangeTests {
    @Test func aValueOutsideItsRangeNamesTheVariable() throws {
        let env = EnvironmentConfig(["PUSH_TEST_RANGED": "0", "PUSH_TEST_OK": "7"])
        do {
            _ = try env.int("PUSH_TEST_RANGED", default: 5, in: 1...Int.max)
            Issue.record("0 was accepted where at least 1 is required")
        } catch let error as EnvironmentConfig.Error {
            #expect(error.variable == "PUSH_TEST_RANGED")
            #expect(error.description.contains("at least 1"))
        }
        #expect(try env.int("PUSH_TEST_OK", default: 5, in: 1...10) == 7)
        #expect(try env.int("PUSH_TEST_UNSET", default: 5, in: 1...10) == 5)
        #expect(throws: EnvironmentConfig.Error.self) { try env.int("PUSH_TEST_OK", default: 5, in: 1...6) }
    }
}

/// Numbers at the edges (Int64.min, -1, 0, Int64.max) never trap where settings are read or turned
/// into durations.
@Suite struct NumberEdgeTests {
    @Test func millisecondSettingsAreBoundedToAYear() throws {
        for (text, accepted) in [("-9223372036854775808", false), ("-1", false), ("0", true), ("31536000000", true),
                                 ("31536000001", false), ("9223372036854775807", false), ("99999999999999999999", false)] {
            let env = EnvironmentConfig(["PUSH_TEST_MS": text])
            do {
                let value = try env.milliseconds("PUSH_TEST_MS", default: .seconds(1))
                #expect(accepted, "\(text) accepted as \(value)")
            } catch let error as EnvironmentConfig.Error {
                #expect(!accepted, "\(text) refused: \(error)")
                #expect(error.variable == "PUSH_TEST_MS")
            }
        }
    }

    @Test func wholeMillisecondsSaturates() {
        #expect(Duration.seconds(Int64.max).wholeMilliseconds == .max)
        #expect(Duration.seconds(Int64.min).wholeMilliseconds == .min)
        #expect(Duration.milliseconds(Int64.max).wholeMilliseconds == .max)
        #expect(Duration.milliseconds(-1).wholeMilliseconds == -1)
        #expect(Duration.zero.wholeMilliseconds == 0)
        #expect(Duration.milliseconds(1500).wholeMilliseconds == 1500)
    }
}
