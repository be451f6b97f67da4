import Testing
@testable import ProtobufCodec

@Suite struct ProtobufCodecPlaceholderTests {
    @Test func placeholder() { #expect(Bool(true)) }
}
