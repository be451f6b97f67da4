import Testing
@testable import Kafka

@Suite struct KafkaPlaceholderTests {
    @Test func placeholder() { #expect(Bool(true)) }
}
