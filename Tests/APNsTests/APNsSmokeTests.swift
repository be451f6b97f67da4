import Testing
@testable import APNs

@Suite struct APNsPlaceholderTests {
    @Test func placeholder() { #expect(Bool(true)) }
}
