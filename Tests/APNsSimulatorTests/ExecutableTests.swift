import Foundation
import Testing

/// The `apns-simulator` executable, configured only through `PUSH_SIM_*` variables, driven by the
/// same outside clients plus `curl --http2-prior-knowledge` on the admin API.
@Suite(.timeLimit(.minutes(1)))
struct ExecutableTests {
    static let binary = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent(".build/debug/apns-simulator")

    @Test func environmentVariablesConfigFileAndClientCA() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build first: \(Self.binary.path) is missing")
        let credentials = try await Credentials.shared.value
        let gone = String(repeating: "ab", count: 32)
        let productionToken = String(repeating: "cd", count: 32)
        let config = credentials.directory.appendingPathComponent("executable-config.json")
        try """
            {"faults": {"status_shares": {"500": 1.0}},
             "tokens": [{"token": "\(productionToken)", "environment": "production"}],
             "unregistered": [{"token": "\(gone)", "timestamp_ms": 42}]}
            """.write(to: config, atomically: true, encoding: .utf8)
        let log = credentials.directory.appendingPathComponent("executable-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let process = Process()
        process.executableURL = Self.binary
        process.environment = ProcessInfo.processInfo.environment.merging([
            "PUSH_SIM_HOST": "127.0.0.1", "PUSH_SIM_PRODUCTION_PORT": "0", "PUSH_SIM_SANDBOX_PORT": "0", "PUSH_SIM_ADMIN_PORT": "0",
            "PUSH_ADMIN_HOST": "127.0.0.1", "PUSH_ADMIN_PORT": "0",
            "PUSH_SIM_TLS_CERT_FILE": credentials.path("server-cert.pem"), "PUSH_SIM_TLS_KEY_FILE": credentials.path("server-key.pem"),
            "PUSH_SIM_KEYS": "KEY0000001:\(Credentials.team):\(credentials.path("key1.pub.pem")),KEY0000002:\(Credentials.team):\(credentials.path("key2.pub.pem")),KEY0000003:\(Credentials.team):\(credentials.path("key3.pub.pem")):production",
            "PUSH_SIM_CLIENT_CA_FILE": credentials.path("ca-cert.pem"), "PUSH_SIM_CONFIG_FILE": config.path,
        ]) { $1 }
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        defer {
            process.terminate()
            try? handle.close()
        }
        var ports: [String: String] = [:]
        for _ in 0..<100 where ports.count < 3 {
            try await Task.sleep(for: .milliseconds(50))
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            for line in text.split(separator: "\n") where line.contains("apns-simulator ready") {
                for field in line.split(separator: " ") {
                    let parts = field.split(separator: "=", maxSplits: 1).map(String.init)
                    if parts.count == 2, parts[0].hasSuffix("_port") { ports[parts[0]] = parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }
                }
            }
        }
        let production = try #require(ports["production_port"], "no ready line: \((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
        let sandbox = try #require(ports["sandbox_port"])
        let admin = try #require(ports["admin_port"])

        let (status, output) = try await run(["curl", "-sS", "--http2-prior-knowledge", "http://127.0.0.1:\(admin)/admin/faults"])
        #expect(status == 0 && output.contains("\"500\""), "curl: \(output)")
        let environment = [
            "SIM_PRODUCTION_PORT": production, "SIM_SANDBOX_PORT": sandbox, "SIM_ADMIN_PORT": admin,
            "SIM_CA": credentials.path("server-cert.pem"), "SIM_DIR": credentials.directory.path, "SIM_TEAM_ID": Credentials.team,
            "SIM_FILE_UNREGISTERED": gone, "SIM_FILE_PRODUCTION_TOKEN": productionToken, "PYTHONDONTWRITEBYTECODE": "1",
        ]
        for scenario in ["config_file", "certificate_auth"] {
            let (status, output) = try await run(["python3", pythonDirectory.appendingPathComponent("scenarios.py").path, scenario],
                                                 environment: environment.merging(["SIM_CLEAR_FAULTS": scenario == "config_file" ? "" : "1"]) { $1 },
                                                 directory: pythonDirectory)
            #expect(status == 0, "scenario \(scenario) against the executable:\n\(output)")
        }
    }
}
