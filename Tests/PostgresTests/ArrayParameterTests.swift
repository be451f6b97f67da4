import Postgres
import PushTestSupport
import Testing

/// Array parameters (`.textArray`, `.int64Array`, `.int32Array`, `.byteaArray`) against the real
/// server: what a batch statement (`unnest($1::text[], …)`, `= ANY($1)`) reads is exactly what was
/// given, element by element and in order.
@Suite(.testDatabase, .timeLimit(.minutes(1)))
struct ArrayParameterTests {
    /// Elements that a text array literal had to quote or escape, and the server's own spellings.
    static let hostile: [String] = [
        "", "plain", #"a"b"#, #"c\d"#, "{,}", "NULL", "null", " padded ", "it's", "line\nbreak\ttab",
        "🚀 日本語 e\u{301}", #"\x00ff"#, String(repeating: "y", count: 70_000),
    ]

    @Test func textElementsRoundTripExactlyInOrder() async throws {
        try await TestDatabase.withConnection { connection in
            for prepared in [false, true] {
                let rows = try await connection.query(
                    "SELECT value, n FROM unnest($1::text[]) WITH ORDINALITY AS t(value, n) ORDER BY n",
                    [.textArray(Self.hostile)], prepared: prepared)
                #expect(try rows.map { try $0.string("value") } == Self.hostile)
            }
            // Without a cast the declared type (text[]) is what the server infers from.
            let match = try await connection.query("SELECT 'NULL' = ANY($1) AS found, cardinality($1) AS n", [.textArray(Self.hostile)])
            #expect(try match.first?.bool("found") == true)
            #expect(try match.first?.int("n") == Self.hostile.count)
        }
    }

    @Test func integerElementsRoundTripAtTheirLimits() async throws {
        let wide: [Int64] = [0, 1, -1, 200, Int64.max, Int64.min, 253_402_300_799_999]
        let narrow: [Int32] = [0, 1, -1, 410, Int32.max, Int32.min]
        try await TestDatabase.withConnection { connection in
            let rows = try await connection.query(
                "SELECT value::text AS value FROM unnest($1::bigint[]) WITH ORDINALITY AS t(value, n) ORDER BY n", [.int64Array(wide)])
            #expect(try rows.map { try $0.string("value") } == wide.map(String.init))
            let narrowRows = try await connection.query(
                "SELECT value::text AS value, pg_typeof(value)::text AS type FROM unnest($1::integer[]) WITH ORDINALITY AS t(value, n) ORDER BY n",
                [.int32Array(narrow)], prepared: true)
            #expect(try narrowRows.map { try $0.string("value") } == narrow.map(String.init))
            #expect(try narrowRows.first?.string("type") == "integer")
        }
    }

    /// Every byte value, an empty element, backslashes and a large element arrive as the same bytes:
    /// how a batch of `send_log` reports is written.
    @Test func byteaElementsRoundTripExactly() async throws {
        let values: [[UInt8]] = [Array(0...255), [], Array(repeating: 0x5c, count: 3), (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }]
        try await TestDatabase.withConnection { connection in
            let rows = try await connection.query(
                "SELECT value FROM unnest($1::bytea[]) WITH ORDINALITY AS t(value, n) ORDER BY n", [.byteaArray(values)])
            #expect(try rows.map { try $0.bytes("value") ?? [9] } == values)
        }
    }

    /// An empty array of each type is a valid, empty array: `= ANY` matches nothing and `unnest` gives
    /// no row (a batch with nothing in one column must not fail the statement).
    @Test func emptyArraysAreEmptyNotMalformed() async throws {
        try await TestDatabase.withConnection { connection in
            let rows = try await connection.query("""
                SELECT cardinality($1::text[]) AS t, cardinality($2::bigint[]) AS b, cardinality($3::integer[]) AS i,
                       cardinality($4::bytea[]) AS y, 'x' = ANY($1::text[]) AS found,
                       (SELECT count(*) FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::bytea[])) AS unnested
                """,
                [.textArray([]), .int64Array([]), .int32Array([]), .byteaArray([])])
            let row = try #require(rows.first)
            #expect(try [row.int("t"), row.int("b"), row.int("i"), row.int("y"), row.int("unnested")] == [0, 0, 0, 0, 0])
            #expect(try row.bool("found") == false)
        }
    }

    /// A NUL inside one element of a `text[]` is refused before the statement is sent, naming the
    /// parameter; nothing is written and the connection stays usable.
    @Test func aTextElementWithANulByteIsRefused() async throws {
        try await TestDatabase.withConnection { connection in
            try await connection.execute("CREATE TABLE nul_elements (s text)")
            do {
                try await connection.execute(
                    "INSERT INTO nul_elements SELECT unnest($2::text[]) WHERE $1 = 'go'", [.string("go"), .textArray(["fine", "alice\0evil"])])
                Issue.record("a text[] element with NUL was accepted")
            } catch let error as PostgresError {
                #expect(error.sqlState == "22021")
                #expect(error.message.contains("$2"))
            }
            #expect(try await connection.query("SELECT s FROM nul_elements").isEmpty)
            // bytea elements keep their NUL bytes.
            let rows = try await connection.query("SELECT unnest($1::bytea[]) AS b", [.byteaArray([[0x61, 0, 0x62]])])
            #expect(try rows.first?.bytes("b") == [0x61, 0, 0x62])
        }
    }
}
