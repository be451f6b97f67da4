import Foundation
import Postgres
import ServiceCore
import Synchronization
import PushTestSupport
import Testing

@Suite(.testDatabase, .timeLimit(.minutes(1)))
struct QueryTests {
    static let hostile: [String] = [
        "",
        "plain",
        "it's",
        "'; DROP TABLE round_trip; --",
        "\"double\" and `back` quotes",
        "back\\slash \\x00 \\\\ $1 $$ dollar $tag$",
        "line\nbreak\r\ttab",
        "🚀 emoji, 日本語, العربية, e\u{301} combining, \u{FEFF} BOM, \u{10FFFF}",
        String(repeating: "x", count: 100_000),
    ]

    @Test func hostileStringsRoundTripExactly() async throws {
        try await TestDatabase.withConnection { connection in
            try await connection.execute("CREATE TABLE round_trip (id int PRIMARY KEY, s text, b bytea)")
            for (index, text) in Self.hostile.enumerated() {
                let inserted = try await connection.execute(
                    "INSERT INTO round_trip (id, s) VALUES ($1, $2)", [.int(index), .string(text)])
                #expect(inserted == 1)
            }
            let rows = try await connection.query("SELECT id, s FROM round_trip ORDER BY id")
            #expect(rows.count == Self.hostile.count)
            for row in rows {
                let id = try #require(try row.int("id"))
                #expect(try row.string("s") == Self.hostile[id], "row \(id)")
            }
            // The table survived the injection attempt, and equality on the server matches too.
            let match = try await connection.query("SELECT count(*) AS n FROM round_trip WHERE s = $1", [.string(Self.hostile[3])])
            #expect(try match.first?.int64("n") == 1)
            let echoed = try await connection.query("SELECT $1::text AS v, length($1::text) AS n", [.string(Self.hostile[7])])
            #expect(try echoed.first?.string("v") == Self.hostile[7])
            #expect(try echoed.first?.int("n") == Self.hostile[7].unicodeScalars.count)
        }
    }

    /// A NUL byte in a text parameter is refused, never cut short (libpq reads text as C strings).
    @Test func textWithANulByteIsRefusedNotTruncated() async throws {
        try await TestDatabase.withConnection { connection in
            try await connection.execute("CREATE TABLE nul_check (s text)")
            do {
                try await connection.execute("INSERT INTO nul_check (s) VALUES ($1)", [.string("alice\0evil")])
                Issue.record("a text value with NUL was accepted")
            } catch let error as PostgresError {
                #expect(error.sqlState == "22021")
                #expect(error.message.contains("$1"))
            }
            #expect(try await connection.query("SELECT s FROM nul_check").isEmpty)
            // The connection is still usable, and bytea keeps NUL bytes.
            #expect(try await connection.query("SELECT $1::bytea AS b", [.bytes([0x61, 0, 0x62])]).first?.bytes("b") == [0x61, 0, 0x62])
        }
    }

    @Test func byteaRoundTripsEveryByte() async throws {
        try await TestDatabase.withConnection { connection in
            try await connection.execute("CREATE TABLE blobs (id int PRIMARY KEY, b bytea)")
            let allBytes = (0...255).map(UInt8.init) + (0...255).reversed().map(UInt8.init)
            var random = SystemRandomNumberGenerator()
            let noise = (0..<65_536).map { _ in UInt8.random(in: 1...255, using: &random) }
            let cases: [[UInt8]] = [[], allBytes, noise, Array("'; DROP TABLE blobs; --".utf8)]
            for (id, bytes) in cases.enumerated() {
                try await connection.execute("INSERT INTO blobs VALUES ($1, $2)", [.int(id), .bytes(bytes)])
            }
            for (id, bytes) in cases.enumerated() {
                let rows = try await connection.query("SELECT b, length(b) AS n FROM blobs WHERE id = $1", [.int(id)])
                #expect(try rows.first?.bytes("b") == bytes)
                #expect(try rows.first?.int("n") == bytes.count)
            }
        }
    }

    @Test func nullsAreDistinctFromEmptyValues() async throws {
        try await TestDatabase.withConnection { connection in
            let rows = try await connection.query(
                "SELECT $1::text AS a, $2::text AS b, $3::bigint AS c, $4::bool AS d, $5::bytea AS e, $6::timestamptz AS f",
                [nil, "", nil, nil, .bytes([]), nil])
            let row = try #require(rows.first)
            #expect(try row.string("a") == nil)
            #expect(try row.isNull("a"))
            #expect(try row.string("b") == "")
            #expect(try row.int64("c") == nil)
            #expect(try row.bool("d") == nil)
            #expect(try row.bytes("e") == [])
            #expect(try row.milliseconds("f") == nil)
            let isNull = try await connection.query("SELECT $1::text IS NULL AS n", [nil])
            #expect(try isNull.first?.bool("n") == true)
        }
    }

    @Test func integersAtTheirExtremes() async throws {
        try await TestDatabase.withConnection { connection in
            try await connection.execute("CREATE TABLE numbers (id int PRIMARY KEY, v bigint, i int)")
            let values: [Int64] = [.min, .min + 1, -1, 0, 1, Int64(Int32.max) + 1, .max - 1, .max]
            for (id, value) in values.enumerated() {
                try await connection.execute("INSERT INTO numbers VALUES ($1, $2, $3)", [.int(id), .int64(value), .int32(Int32(truncatingIfNeeded: id))])
            }
            let rows = try await connection.query("SELECT v, i FROM numbers ORDER BY id")
            #expect(try rows.map { try $0.int64("v") } == values)
            let sum = try await connection.query("SELECT sum(v) AS s, min(v) AS lo, max(v) AS hi FROM numbers WHERE v > 0")
            #expect(try sum.first?.int64("lo") == 1)
            #expect(try sum.first?.int64("hi") == .max)
            #expect(try sum.first?.string("s") != nil)  // numeric beyond Int64: readable as text
            #expect(throws: PostgresError.self) { try sum.first?.int64("s") }
            // Out-of-range for int4 is the server's error, not a silent truncation.
            await #expect(throws: PostgresError.self) {
                try await connection.execute("INSERT INTO numbers VALUES (99, 0, $1)", [.int64(Int64(Int32.max) + 1)])
            }
        }
    }

    @Test func booleansDoublesAndUUIDs() async throws {
        try await TestDatabase.withConnection { connection in
            let uuid = UUID()
            let rows = try await connection.query(
                "SELECT $1::bool AS t, $2::bool AS f, NOT $1::bool AS nt, $3::float8 AS d, $4::float8 AS inf, $5::uuid AS u, 0.1::numeric + 0.2 AS n",
                [true, false, .double(-1.5e-300), .double(.infinity), .uuid(uuid)])
            let row = try #require(rows.first)
            #expect(try row.bool("t") == true)
            #expect(try row.bool("f") == false)
            #expect(try row.bool("nt") == false)
            #expect(try row.double("d") == -1.5e-300)
            #expect(try row.double("inf") == .infinity)
            #expect(try row.uuid("u") == uuid)
            #expect(try row.double("n") == 0.3)
            #expect(try row.string("n") == "0.3")
        }
    }

    @Test func timestampsRoundTripToTheMillisecond() async throws {
        try await TestDatabase.withConnection { connection in
            try await connection.execute("CREATE TABLE times (id int PRIMARY KEY, t timestamptz)")
            let values: [Int64] = [0, 1, -1, 1_700_000_000_123, -62_135_596_800_000, 253_402_300_799_999, 951_782_400_000]
            for (id, ms) in values.enumerated() {
                try await connection.execute("INSERT INTO times VALUES ($1, $2)", [.int(id), .timestamp(milliseconds: ms)])
            }
            let rows = try await connection.query("SELECT t, extract(epoch FROM t) * 1000 AS server_ms FROM times ORDER BY id")
            #expect(try rows.map { try $0.milliseconds("t") } == values)
            // The server agrees on the instant, not just the text.
            #expect(try rows.map { try Int64($0.double("server_ms")!.rounded()) } == values)

            // Offsets, leap days, microseconds (rounded down), plain timestamps and dates.
            let parsed = try await connection.query("""
                SELECT '2024-02-29 12:34:56.789999+05:30'::timestamptz AS a,
                       '1969-12-31 23:59:59.9995'::timestamp AS b,
                       '2000-03-01'::date AS c
                """)
            let row = try #require(parsed.first)
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            let expected = try #require(formatter.date(from: "2024-02-29T07:04:56.789Z"))
            #expect(try row.milliseconds("a") == Int64((expected.timeIntervalSince1970 * 1000).rounded()))
            #expect(try row.milliseconds("b") == -1)
            #expect(try row.milliseconds("c") == 951_868_800_000)

            let now = try await connection.query("SELECT now() AS now")
            let serverNow = try #require(try now.first?.milliseconds("now"))
            #expect(abs(serverNow - SystemWallClock().nowMilliseconds()) < 5_000)
            #expect(try now.first?.date("now").map { abs($0.timeIntervalSinceNow) < 5 } == true)
        }
    }

    @Test func wrongTypeAccessNamesTheColumn() async throws {
        try await TestDatabase.withConnection { connection in
            let rows = try await connection.query("SELECT 'abc'::text AS name, 5 AS n, '\\x01'::bytea AS b")
            let row = try #require(rows.first)
            let asInt = #expect(throws: PostgresError.self) { try row.int64("name") }
            #expect(asInt?.code == .typeMismatch)
            #expect(asInt?.message.contains("\"name\"") == true)
            #expect(asInt?.message.contains("text") == true)
            let asBool = #expect(throws: PostgresError.self) { try row.bool("n") }
            #expect(asBool?.code == .typeMismatch)
            #expect(asBool?.message.contains("\"n\" has type integer") == true)
            #expect((#expect(throws: PostgresError.self) { try row.bytes("name") })?.code == .typeMismatch)
            #expect((#expect(throws: PostgresError.self) { try row.string("b") })?.code == .typeMismatch)
            #expect((#expect(throws: PostgresError.self) { try row.milliseconds("n") })?.code == .typeMismatch)
            let missing = #expect(throws: PostgresError.self) { try row.string("nme") }
            #expect(missing?.code == .columnNotFound)
            #expect(missing?.message.contains("\"nme\"") == true)
            #expect(try row.string("n") == "5")
            #expect(try row.bytes("b") == [1])
        }
    }

    @Test func commandsReportAffectedRowsAndScriptsRunSeveralStatements() async throws {
        try await TestDatabase.withConnection { connection in
            try await connection.executeScript("""
                CREATE TABLE counted (id int PRIMARY KEY, tag text);
                INSERT INTO counted SELECT g, 'x' FROM generate_series(1, 10) g;
                """)
            #expect(try await connection.execute("UPDATE counted SET tag = $1 WHERE id <= $2", ["y", 7]) == 7)
            #expect(try await connection.execute("DELETE FROM counted WHERE tag = $1", ["x"]) == 3)
            let rows = try await connection.query("SELECT id FROM counted")
            #expect(rows.count == 7)
            #expect(rows.commandTag == "SELECT 7")
            #expect(rows.columns.map(\.name) == ["id"])
            #expect(try await connection.execute("CREATE TABLE empty_one (x int)") == 0)
            // One statement per parameterized call: a second one is refused, not run.
            let refused = await #expect(throws: PostgresError.self) {
                try await connection.query("SELECT 1; DROP TABLE counted", [])
            }
            #expect(refused?.code == .syntaxError)
            #expect(try await connection.query("SELECT count(*) AS n FROM counted").first?.int("n") == 7)
        }
    }

    @Test func noticesReachTheHandlerNotStderr() async throws {
        let notices = Mutex<[PostgresNotice]>([])
        let connection = try await TestDatabase.connect { notice in notices.withLock { $0.append(notice) } }
        try await connection.executeScript("DO $$ BEGIN RAISE NOTICE 'hello %', 'world'; RAISE WARNING 'careful'; END $$")
        await connection.close()
        let received = notices.withLock { $0 }
        #expect(received.map(\.message) == ["hello world", "careful"])
        #expect(received.map(\.severity) == ["NOTICE", "WARNING"])
        #expect(received.first?.sqlState == "00000")
    }

    @Test func connectFailuresSayWhatFailed() async throws {
        // A port that nothing listens on: bind one, read it, close it.
        let port = try freePort()
        let refused = await #expect(throws: PostgresError.self) {
            try await PostgresConnection.connect("postgresql://push:sekret@127.0.0.1:\(port)/push")
        }
        #expect(refused?.code == .connectionFailed)
        #expect(refused?.message.contains("127.0.0.1:\(port)") == true)
        #expect(refused?.message.contains("refused") == true)
        #expect(refused?.description.contains("sekret") == false)
        #expect(refused?.isRetryable == false)

        let malformed = await #expect(throws: PostgresError.self) { try await PostgresConnection.connect("postgresql://[::1") }
        #expect(malformed?.code == .connectionFailed)
        #expect(malformed?.message.contains("invalid connection string") == true)

        let unknownDatabase = await #expect(throws: PostgresError.self) {
            try await PostgresConnection.connect(TestServer.url(try await TestServer.adminURL.value, database: "no_such_db_here"))
        }
        #expect(unknownDatabase?.message.contains("no_such_db_here") == true)
    }

    @Test func closedConnectionsRefuseWork() async throws {
        let connection = try await TestDatabase.connect()
        #expect(connection.isConnected)
        await connection.close()
        await connection.close()
        #expect(!connection.isConnected)
        let error = await #expect(throws: PostgresError.self) { try await connection.query("SELECT 1") }
        #expect(error?.code == .connectionClosed)
    }
}

/// A loopback TCP port with no listener.
func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestFailure("socket() failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw TestFailure("bind() failed") }
    return Int(UInt16(bigEndian: address.sin_port))
}
