import Testing
@testable import HTTP2

@Suite struct HTTP2PlaceholderTests {
    @Test func placeholder() { #expect(Bool(true)) }
}
