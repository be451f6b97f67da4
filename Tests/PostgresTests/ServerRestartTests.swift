import Foundation
import Postgres
import PushTestSupport
import Testing

/// A private server on its own port and data directory (through `scripts/postgres-dev` with
/// `PUSH_PG_PORT` and `PUSH_VAR_DIR`), stopped and started under a pool.
@Suite(.timeLimit(.minutes(1)))
struct ServerRestartTests {
    @Test func poolRecoversAfterTheServerRestarts() async throws {
        let port = try freePort()
        let varDirectory = "/tmp/push-pg-restart-\(UUID().uuidString.prefix(8))"
        let environment = ["PUSH_PG_PORT": String(port), "PUSH_VAR_DIR": varDirectory]
        defer { try? FileManager.default.removeItem(atPath: varDirectory) }
        _ = try await TestServer.runScript("start", environment: environment)
        do {
            // start when running is a no-op; url names the port.
            _ = try await TestServer.runScript("start", environment: environment)
            let url = try await TestServer.runScript("url", environment: environment).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(url == "postgresql://postgres@127.0.0.1:\(port)/push?passfile=\(varDirectory)/pg/pgpass")
            // Every role needs its password over TCP, the superuser too: without the file, refused.
            let refused = await #expect(throws: PostgresError.self) {
                try await PostgresConnection.connect("postgresql://postgres@127.0.0.1:\(port)/push?passfile=/nonexistent").close()
            }
            #expect("\(refused.map { "\($0)" } ?? "")".contains("password"), "\(String(describing: refused))")
            for name in ["superuser-password", "pgpass"] {
                let mode = try FileManager.default.attributesOfItem(atPath: "\(varDirectory)/pg/\(name)")[.posixPermissions] as? Int
                #expect(mode == 0o600, "\(name): \(String(mode ?? 0, radix: 8))")
            }

            let pool = PostgresPool(configuration: .init(conninfo: url, minimumConnections: 2, maximumConnections: 2))
            try await pool.start()
            #expect(try await pool.query("SELECT current_database() AS db").first?.string("db") == "push")

            _ = try await TestServer.runScript("stop", environment: environment)
            let down = await #expect(throws: PostgresError.self) { try await pool.query("SELECT 1") }
            #expect(down?.code == .connectionFailed)
            #expect(pool.statistics.discarded == 2)
            #expect(pool.statistics.open == 0)

            _ = try await TestServer.runScript("start", environment: environment)
            #expect(try await pool.query("SELECT 1 AS v").first?.int("v") == 1)
            await pool.close()
        } catch {
            _ = try? await TestServer.runScript("stop", environment: environment)
            throw error
        }
        _ = try await TestServer.runScript("stop", environment: environment)
        let status = await #expect(throws: TestFailure.self) { try await TestServer.runScript("status", environment: environment) }
        #expect(status?.description.contains("exited 3") == true)
    }
}
