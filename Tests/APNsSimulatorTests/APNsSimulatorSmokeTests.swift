import Testing
@testable import APNsSimulator

@Suite struct APNsSimulatorPlaceholderTests {
    @Test func placeholder() { #expect(Bool(true)) }
}
