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
