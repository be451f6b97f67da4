import Foundation
import Kafka
import Postgres
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

extension DispatcherEngineSuites {
    /// The bound on what a SIGKILL can make a redelivery publish again when acknowledgement marks are on
    /// (docs/send-log.md "Acknowledgement marks"): the reports recorded in `send_log` and not yet
    /// marked. On a running engine (`EngineWorld`: real PostgreSQL, librdkafka's mock cluster, the APNs
    /// simulator over TLS).
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(3)))
    struct UnmarkedWindowTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        /// Kafka acknowledges slowly (every broker response delayed 400 ms) while a request of 1,200
        /// tokens goes out: Apple answers at once, so without a bound the in-flight budget's thousand
        /// outcomes are recorded long before the first report is acknowledged, and a SIGKILL then would
        /// publish them all again. A statement trigger on `send_log_v2` counts the request's unmarked rows
        /// after every insert: the count never exceeds the unmarked window (`unflushedMarks`), and in
        /// the end every row is marked, every token reported once.
        @Test func reportsRecordedAndNotYetMarkedNeverExceedTheUnmarkedWindow() async throws {
            let world = try await EngineWorld()
            let suffix = UUID().uuidString.prefix(8).lowercased()
            let requestID = "unmarked-\(suffix)"
            let probe = "unmarked_probe_\(suffix)"
            try await world.pool.execute("CREATE TABLE \(probe) (unmarked bigint NOT NULL)")
            try await world.pool.execute("""
                CREATE FUNCTION \(probe)() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  INSERT INTO \(probe)
                  SELECT count(*) FROM send_log_v2 WHERE request_id = '\(requestID)' AND NOT acknowledged;
                  RETURN NULL;
                END $$
                """)
            try await world.pool.execute("CREATE TRIGGER \(probe) AFTER INSERT ON send_log_v2 FOR EACH STATEMENT EXECUTE FUNCTION \(probe)()")

            let window = SendLogWriter(pool: world.pool, marksAcknowledgements: true).unflushedMarks
            let tokens = (0..<1_200).map { EngineWorld.token("d0", $0) }
            let engine = try world.startEngine { $0.sendLogAcknowledgementMarks = true }
            try await world.send(requestID, to: tokens)
            try world.cluster.setBrokerRoundTripTime(-1, milliseconds: 400)
            try await eventually("the request completed", timeout: .seconds(90)) { world.feedback.completions(requestID).count == 1 }
            try world.cluster.setBrokerRoundTripTime(-1, milliseconds: 0)

            let peak = try #require(try await world.pool.query("SELECT max(unmarked) AS peak, count(*) AS n FROM \(probe)").first)
            let highest = try peak.int("peak") ?? 0
            #expect(try peak.int("n") ?? 0 > 1, "the trigger counted after every insert")
            #expect(highest <= window, "\(highest) reports recorded and not yet marked at once; the window is \(window)")
            #expect(highest > 0)
            try await eventually("every row marked") {
                try await world.count("SELECT count(*) FROM send_log_v2 WHERE request_id = $1 AND NOT acknowledged", requestID) == 0
            }
            #expect(Set(world.feedback.reports(requestID).map(\.deviceToken)) == Set(tokens))
            #expect(world.feedback.reports(requestID).count == tokens.count, "every token reported once")
            let completed = try #require(world.feedback.completions(requestID).first)
            #expect((completed.total, completed.delivered) == (1_200, 1_200))

            try await engine.stop()
            try await world.pool.execute("DROP TRIGGER \(probe) ON send_log_v2")
            try await world.pool.execute("DROP FUNCTION \(probe)()")
            try await world.pool.execute("DROP TABLE \(probe)")
            await world.close()
        }
    }
}
