import APNs
import APNsSimulator
import Foundation
import PushTestSupport
import ServiceCore
import Testing

/// Runs a program to completion without blocking the cooperative pool (`PushTestSupport.runProgram`).
func run(_ arguments: [String], environment: [String: String] = [:], directory: URL? = nil) async throws -> (status: Int32, output: String) {
    try await runProgram(arguments, environment: environment, directory: directory)
}

/// Test credentials made with the openssl CLI in a temporary directory (never committed): the
/// listeners' certificate, provider-token keys (key1/key2/key3/key4 trusted, key4 topic-specific, `untrusted` not), a client
/// CA with two provider certificates (one listing topics in Apple's extension 1.2.840.113635.100.6.3.6,
/// one with only a subject UID) and a certificate from another CA.
struct Credentials: Sendable {
    let directory: URL
    static let team = "TEAM000001"

    static let shared = Task<Credentials, any Error> { try await generate() }

    func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    private static func generate() async throws -> Credentials {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-sim-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let extensions = """
            [apns]
            basicConstraints = CA:FALSE
            1.2.840.113635.100.6.3.6 = ASN1:SEQUENCE:topics
            [plain]
            basicConstraints = CA:FALSE
            [topics]
            t1 = UTF8String:com.example.app
            k1 = SEQUENCE:kinds_app
            t2 = UTF8String:com.example.app.voip
            k2 = SEQUENCE:kinds_voip
            [kinds_app]
            k = UTF8String:app
            [kinds_voip]
            k = UTF8String:voip

            """
        try extensions.write(to: directory.appendingPathComponent("ext.cnf"), atomically: true, encoding: .utf8)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2"]
        var commands: [[String]] = [
            ["openssl", "req", "-x509"] + ec + ["-subj", "/CN=apns-simulator", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                                               "-keyout", "server-key.pem", "-out", "server-cert.pem"],
            ["openssl", "req", "-x509"] + ec + ["-subj", "/CN=Test Push CA", "-keyout", "ca-key.pem", "-out", "ca-cert.pem"],
            ["openssl", "req", "-x509"] + ec + ["-subj", "/CN=Rogue CA", "-keyout", "rogue-ca-key.pem", "-out", "rogue-ca-cert.pem"],
        ]
        for key in ["key1", "key2", "key3", "key4", "untrusted"] {
            commands.append(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "\(key).p8"])
            commands.append(["openssl", "pkey", "-in", "\(key).p8", "-pubout", "-out", "\(key).pub.pem"])
        }
        for (name, uid, ca, section) in [("client-multi", "com.example.app", "ca", "apns"),
                                         ("client-single", "com.example.single", "ca", "plain"),
                                         ("rogue", "com.example.app", "rogue-ca", "plain")] {
            commands.append(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                             "-subj", "/UID=\(uid)/CN=Apple Push Services: \(uid)/O=Example/C=US",
                             "-keyout", "\(name)-key.pem", "-out", "\(name).csr"])
            commands.append(["openssl", "x509", "-req", "-in", "\(name).csr", "-CA", "\(ca)-cert.pem", "-CAkey", "\(ca)-key.pem",
                             "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-extensions", section, "-out", "\(name).pem"])
        }
        for command in commands {
            let (status, output) = try await run(command, directory: directory)
            guard status == 0 else { throw TestFailure("\(command.joined(separator: " ")) failed: \(output)") }
        }
        let single = try String(contentsOf: directory.appendingPathComponent("client-single.pem"), encoding: .utf8)
            + String(contentsOf: directory.appendingPathComponent("client-single-key.pem"), encoding: .utf8)
        try single.write(to: directory.appendingPathComponent("client-single-combined.pem"), atomically: true, encoding: .utf8)
        return Credentials(directory: directory)
    }

    func trustedKeys() throws -> [APNsSimulator.TrustedKey] {
        try APNsSimulator.TrustedKey.parseList(
            "KEY0000001:\(Self.team):\(path("key1.pub.pem")),KEY0000002:\(Self.team):\(path("key2.pub.pem")),"
                + "KEY0000003:\(Self.team):\(path("key3.pub.pem")):production,"
                + "KEY0000004:\(Self.team):\(path("key4.pub.pem")):sandbox:topics=com.example.app+com.example.scoped")
    }

    func configuration(clock: ManualWallClock) throws -> APNsSimulator.Configuration {
        var configuration = APNsSimulator.Configuration(
            certificateChainFile: path("server-cert.pem"), privateKeyFile: path("server-key.pem"), trustedKeys: try trustedKeys())
        configuration.clientCAFile = path("ca-cert.pem")
        configuration.clock = clock
        configuration.eventLoopCount = 1
        return configuration
    }
}

let pythonDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python")

/// Starts a simulator on free ports with a manual clock at the current time, runs `body`, closes it.
@discardableResult
func withSimulator<T>(
    configure: (inout APNsSimulator.Configuration, Credentials) throws -> Void = { _, _ in },
    _ body: (APNsSimulator, Credentials) async throws -> T
) async throws -> T {
    ProcessSignals.ignoreSIGPIPE()
    let credentials = try await Credentials.shared.value
    let clock = ManualWallClock(milliseconds: SystemWallClock().nowMilliseconds())
    var configuration = try credentials.configuration(clock: clock)
    try configure(&configuration, credentials)
    let simulator = try APNsSimulator.start(configuration: configuration)
    defer { simulator.close() }
    return try await body(simulator, credentials)
}

/// Runs `scenarios.py <name>` against `simulator`; returns its output, failing when it fails.
@discardableResult
func runScenario(_ name: String, _ simulator: APNsSimulator, _ credentials: Credentials, extraEnvironment: [String: String] = [:]) async throws -> String {
    var environment = [
        "SIM_PRODUCTION_PORT": "\(simulator.productionPort)", "SIM_SANDBOX_PORT": "\(simulator.sandboxPort)",
        "SIM_ADMIN_PORT": "\(simulator.adminPort ?? 0)", "SIM_CA": credentials.path("server-cert.pem"),
        "SIM_DIR": credentials.directory.path, "SIM_TEAM_ID": Credentials.team, "PYTHONDONTWRITEBYTECODE": "1",
    ]
    environment.merge(extraEnvironment) { $1 }
    let (status, output) = try await run(["python3", pythonDirectory.appendingPathComponent("scenarios.py").path, name],
                                         environment: environment, directory: pythonDirectory)
    #expect(status == 0, "scenario \(name) failed:\n\(output)")
    return output
}
