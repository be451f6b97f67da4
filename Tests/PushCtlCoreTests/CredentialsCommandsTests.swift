import APNsKeyRegistry
import Foundation
import Testing

@testable import PushCtlCore

/// `pushctl credentials list|check`: what `list` prints for each key (never key material), and
/// `check` failing with the file and entry of a key that does not load.
@Suite struct CredentialsCommandsTests {
    static let json = """
        {"apps": [{"bundle_id": "com.example.*", "keys": [
                    {"team_id": "TEAMA00001", "key_id": "KEYA000001", "p8_file": "a.p8"},
                    {"team_id": "TEAMA00001", "key_id": "KEYA000002", "p8_file": "a2.p8", "activate_at": "2030-01-01T00:00:00Z"}]},
                  {"bundle_id": "com.acquired.app", "keys": [
                    {"team_id": "TEAMB00001", "key_id": "KEYB000001", "p8_file": "/keys/b.p8", "environment": "production",
                     "topics": ["com.acquired.app"]}]}]}
        """

    @Test func listNamesEachKeyItsAppScopeAndActivation() throws {
        let now = try #require(CredentialsRegistry.rfc3339("2027-01-01T00:00:00Z"))
        let registry = try CredentialsRegistry(json: Array(Self.json.utf8), file: "/etc/push/credentials.json", loadedAt: now)
        let lines = CredentialsCommands.lines(registry, now: now, json: false)
        #expect(lines == [
            "com.example.*  TEAMA00001/KEYA000001  any environment, any topic  activate_at on load  active  /etc/push/a.p8",
            "com.example.*  TEAMA00001/KEYA000002  any environment, any topic  activate_at 2030-01-01T00:00:00Z  pending  /etc/push/a2.p8",
            "com.acquired.app  TEAMB00001/KEYB000001  environment production, topics com.acquired.app  activate_at on load  active  /keys/b.p8",
        ])
        let json = CredentialsCommands.lines(registry, now: now, json: true)
        #expect(json.count == 3 && json[2].contains(#""environment":"production""#) && json[1].contains(#""state":"pending""#))
    }

    /// `--admin`: what a dispatcher's `GET /v1/credentials` reports, beside each line; a key the
    /// dispatcher does not hold shows "not loaded".
    @Test func listWithADispatchersFactsShowsStateLastMintAndLastRefusal() throws {
        let now = try #require(CredentialsRegistry.rfc3339("2027-01-01T00:00:00Z"))
        let registry = try CredentialsRegistry(json: Array(Self.json.utf8), file: "/etc/push/credentials.json", loadedAt: now)
        let answer = """
            {"source":"/etc/push/credentials.json","keys":[
             {"bundle_id":"com.example.*","team_id":"TEAMA00001","key_id":"KEYA000001","environment":"any","topics":null,"activate_at":null,
              "state":"in_fallback","state_detail":"APNs refused it","last_mint_at":"2026-12-31T23:00:00Z",
              "last_refusal_at":"2026-12-31T23:59:00Z","last_refusal_reason":"InvalidProviderToken"},
             {"bundle_id":"com.acquired.app","team_id":"TEAMB00001","key_id":"KEYB000001","environment":"production","topics":["com.acquired.app"],
              "activate_at":null,"state":"serving","state_detail":null,"last_mint_at":null,"last_refusal_at":null,"last_refusal_reason":null}]}
            """
        let facts = try CredentialsCommands.runtimeFacts(answer, from: "http://127.0.0.1:9102")
        let lines = CredentialsCommands.lines(registry, now: now, json: false, runtime: facts)
        #expect(lines == [
            "com.example.*  TEAMA00001/KEYA000001  any environment, any topic  activate_at on load  active  /etc/push/a.p8  dispatcher: in_fallback"
                + "  last mint 2026-12-31T23:00:00Z  last refusal 2026-12-31T23:59:00Z InvalidProviderToken  (APNs refused it)",
            "com.example.*  TEAMA00001/KEYA000002  any environment, any topic  activate_at 2030-01-01T00:00:00Z  pending  /etc/push/a2.p8"
                + "  dispatcher: not loaded",
            "com.acquired.app  TEAMB00001/KEYB000001  environment production, topics com.acquired.app  activate_at on load  active  /keys/b.p8"
                + "  dispatcher: serving  last mint never  last refusal never",
        ])
        let json = CredentialsCommands.lines(registry, now: now, json: true, runtime: facts)
        #expect(json[0].contains(#""dispatcher_state":"in_fallback","state_detail":"APNs refused it","last_mint_at":"2026-12-31T23:00:00Z","last_refusal_at":"2026-12-31T23:59:00Z","last_refusal_reason":"InvalidProviderToken""#))
        #expect(json[1].contains(#""dispatcher_state":"not loaded""#))
        #expect(throws: PushCtlError.self) { try CredentialsCommands.runtimeFacts("<html>", from: "http://127.0.0.1:9102") }
    }

    @Test func checkFailsNamingTheFileAndTheEntryOfAKeyThatDoesNotLoad() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushctl-credentials-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try "not a key\n".write(to: directory.appendingPathComponent("a.p8"), atomically: true, encoding: .utf8)
        let file = directory.appendingPathComponent("credentials.json").path
        try Self.json.write(toFile: file, atomically: true, encoding: .utf8)
        #expect(await PushCtl.run(["credentials", "check", "--file", file], environment: [:]) == PushCtlExitCode.failed.rawValue)
        #expect(throws: PushCtlError.self) { try CredentialsCommands.check(try CommandLineArguments(["--file", file], options: Self.options), try PushCtlSettings(environment: [:], envFile: nil)) }
        do {
            try CredentialsCommands.check(try CommandLineArguments(["--file", file], options: Self.options), try PushCtlSettings(environment: [:], envFile: nil))
        } catch let error as PushCtlError {
            #expect(error.message.contains("\(file): apps[0] (com.example.*) keys[0] (TEAMA00001/KEYA000001)"))
            #expect(error.message.contains("keys[1] (TEAMA00001/KEYA000002): cannot read the .p8 file"))
        }
        #expect(await PushCtl.run(["credentials", "list"], environment: [:]) == PushCtlExitCode.usage.rawValue)
    }

    static var options: [CommandLineArguments.Option] {
        PushCtlCommand.all.first { $0.name == "credentials check" }?.parsedOptions ?? []
    }
}
