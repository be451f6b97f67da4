import Testing
@testable import GRPC

@Suite struct GRPCPlaceholderTests {
    @Test func placeholder() { #expect(Bool(true)) }
}
