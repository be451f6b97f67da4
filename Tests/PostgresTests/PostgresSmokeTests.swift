import Testing
@testable import Postgres

@Suite struct PostgresPlaceholderTests {
    @Test func placeholder() { #expect(Bool(true)) }
}
