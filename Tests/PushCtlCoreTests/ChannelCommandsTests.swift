import AdminHTTP
import PushMessages
import ServiceCore
import Testing

@testable import PushCtlCore

/// `pushctl channel create|delete|list`: the commands built from the line (checked as the dispatcher
/// checks them), and `list` against a real admin port (libmicrohttpd on loopback).
@Suite struct ChannelCommandsTests {
    func command(_ line: [String]) throws -> ChannelCommand {
        let (resolved, rest) = try PushCtlCommand.resolve(line)
        let action: ChannelCommand.Action = resolved.name == "channel create" ? .create : .delete
        return try ChannelCommands.command(action, try CommandLineArguments(rest, options: resolved.parsedOptions), nowMs: 5)
    }

    @Test func createAndDeleteCarryTheKeyAndTheOptions() throws {
        let create = try command(["channel", "create", "com.example.scores", "match-8812", "--policy", "most-recent", "--delete-after", "3600",
                                  "--environment", "sandbox"])
        #expect(create.action == .create && create.environment == .sandbox && create.messageStoragePolicy == .mostRecentMessageStored)
        #expect(create.deleteAfterMs == 3_600_000 && create.requestedAtMs == 5)
        #expect(create.recordKey == "com.example.scores/sandbox/match-8812")
        let delete = try command(["channel", "delete", "com.example.scores", "match-8812"])
        #expect(delete.action == .delete && delete.environment == .production && delete.recordKey == "com.example.scores/production/match-8812")
    }

    @Test func badArgumentsAreNamed() throws {
        func usage(_ line: [String]) -> String? {
            do {
                _ = try command(line)
                return nil
            } catch let error as CommandLineArguments.UsageError {
                return error.message
            } catch {
                return "\(error)"
            }
        }
        #expect(usage(["channel", "create", "com.example.scores"])?.contains("BUNDLE_ID and NAME") == true)
        #expect(usage(["channel", "create", "com.example.scores", "a b"])?.hasPrefix("NAME:") == true)
        #expect(usage(["channel", "create", "com_example", "x"])?.hasPrefix("BUNDLE_ID:") == true)
        #expect(usage(["channel", "create", "com.example.scores", "x", "--policy", "all"]) != nil)
        #expect(usage(["channel", "delete", "com.example.scores", "x", "--environment", "staging"]) != nil)
    }

    /// `list` reads `GET /v1/channels/...` over HTTP/1.1 and prints one line per channel; 404 is exit 5.
    @Test func listReadsTheAdminPort() async throws {
        let body = #"{"channels":[{"bundle_id":"com.example.scores","name":"m1","environment":"production","channel_id":"Y2g=","state":"active","message_storage_policy":"NO_MESSAGE_STORED","created_at_ms":1,"updated_at_ms":2,"delete_at_ms":0}]}"#
        var configuration = AdminServer.Configuration(port: 0)
        configuration.host = "127.0.0.1"
        let server = try AdminServer.start(configuration: configuration, endpoints: AdminEndpoints(
            metrics: { "" }, liveness: { ProbeReport(checks: []) }, readiness: { ProbeReport(checks: []) },
            asyncRoutes: [AdminEndpoints.AsyncRoute(prefix: "/v1/channels/") { rest in
                rest == "com.example.scores" ? AdminResponse(status: 200, contentType: AdminResponse.json, body: body + "\n")
                    : AdminResponse(status: 404, contentType: AdminResponse.json, body: #"{"error":"not_found"}"# + "\n")
            }]))
        defer { server.stop() }
        async let serving: Void = server.serve()
        let answer = try await AdminPortClient.get("http://127.0.0.1:\(server.port)", path: "/v1/channels/com.example.scores", option: "dispatcher")
        #expect(answer.status == 200 && answer.body == body + "\n")
        #expect(ChannelCommands.lines(answer.body) == "m1  production  active  Y2g=  NO_MESSAGE_STORED  delete_at_ms=0")
        let missing = try await AdminPortClient.get("http://127.0.0.1:\(server.port)", path: "/v1/channels/com.example.scores/x", option: "dispatcher")
        #expect(missing.status == 404)
        // An address nothing listens on: exit status 3 (unavailable), naming the address.
        let unreachable = await #expect(throws: PushCtlError.self) { try await AdminPortClient.get("http://127.0.0.1:1", path: "/", option: "dispatcher") }
        #expect(unreachable?.exitCode == .unavailable && unreachable?.message.contains("127.0.0.1:1") == true)
        server.stop()
        await serving
    }
}
