import APNs
import APNsSimulator
import Foundation
import PushDomain
import PushTestSupport
import HTTP2
import ServiceCore
import Synchronization
import Testing

/// Runs a program to completion without blocking the cooperative pool (`PushTestSupport.runProgram`).
func run(_ arguments: [String], directory: URL? = nil) async throws -> (status: Int32, output: String) {
    try await runProgram(arguments, directory: directory)
}

let pythonDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python")

/// Credentials made with the openssl CLI in a temporary directory at test time (never committed):
/// the simulator's server certificate, two teams' `.p8` keys, a provider CA with an app
/// certificate (Apple topics extension: the app, `.voip`, `.complication`, `.pushkit.fileprovider`;
/// valid 2 days, so inside the expiry warning window), its PKCS#12 export (password `secret`), and
/// an MDM certificate whose topic is its subject UID.
struct Credentials: Sendable {
    let directory: URL
    static let team1 = "TEAM000001"
    static let team2 = "TEAM000002"
    static let key1 = "KEY0000001"
    static let key2 = "KEY0000002"
    static let app = "com.example.app"
    static let mdmTopic = "com.apple.mgmt.External.5f4a1c7e"

    static let shared = Task<Credentials, any Error> { try await generate() }

    func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
    func text(_ name: String) throws -> String { try String(contentsOfFile: path(name), encoding: .utf8) }

    private static func generate() async throws -> Credentials {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-client-tests-\(UUID().uuidString)")
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
            t3 = UTF8String:com.example.app.complication
            k3 = SEQUENCE:kinds_app
            t4 = UTF8String:com.example.app.pushkit.fileprovider
            k4 = SEQUENCE:kinds_app
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
        ]
        for key in ["key1", "key2"] {
            commands.append(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "\(key).p8"])
            commands.append(["openssl", "pkey", "-in", "\(key).p8", "-pubout", "-out", "\(key).pub.pem"])
        }
        for (name, uid, section) in [("app", app, "apns"), ("mdm", mdmTopic, "plain")] {
            commands.append(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                             "-subj", "/UID=\(uid)/CN=Apple Push Services: \(uid)/O=Example/C=US",
                             "-keyout", "\(name)-key.pem", "-out", "\(name).csr"])
            commands.append(["openssl", "x509", "-req", "-in", "\(name).csr", "-CA", "ca-cert.pem", "-CAkey", "ca-key.pem",
                             "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-extensions", section, "-out", "\(name).pem"])
        }
        commands.append(["openssl", "pkcs12", "-export", "-in", "app.pem", "-inkey", "app-key.pem", "-passout", "pass:secret", "-out", "app.p12"])
        for command in commands {
            let (status, output) = try await run(command, directory: directory)
            guard status == 0 else { throw TestFailure("\(command.joined(separator: " ")) failed: \(output)") }
        }
        return Credentials(directory: directory)
    }

    func trustedKeys() throws -> [APNsSimulator.TrustedKey] {
        [
            APNsSimulator.TrustedKey(keyID: Self.key1, teamID: Self.team1, publicKeyPEM: try text("key1.pub.pem")),
            APNsSimulator.TrustedKey(keyID: Self.key2, teamID: Self.team2, publicKeyPEM: try text("key2.pub.pem")),
        ]
    }

    func tokens(key: Int = 1, clock: any WallClock, metrics: MetricsRegistry = .shared) throws -> APNsProviderTokenCache {
        let signingKey = try APNsSigningKey(p8: try text("key\(key).p8"))
        return APNsProviderTokenCache(
            signingKey: signingKey, keyID: key == 1 ? Self.key1 : Self.key2, teamID: key == 1 ? Self.team1 : Self.team2, clock: clock,
            metrics: metrics)
    }

    func appCertificate() throws -> APNsCertificateCredentials {
        try APNsCertificateCredentials(certificatePEM: try text("app.pem"), privateKeyPEM: try text("app-key.pem"))
    }

    func mdmCertificate() throws -> APNsCertificateCredentials {
        try APNsCertificateCredentials(certificatePEM: try text("mdm.pem"), privateKeyPEM: try text("mdm-key.pem"))
    }
}

/// A simulator on free loopback ports with a manual clock, plus what tests need around it.
struct Harness: Sendable {
    let simulator: APNsSimulator
    let credentials: Credentials
    let clock: ManualWallClock
    /// The clients `withSimulator` shuts down after the test's body, before it closes the simulator.
    let clients: ClientsToShutDown

    /// Has `withSimulator` shut `client` down (awaited) once the test's body returned or threw.
    func shutdownAtEnd(_ client: APNsClient) { clients.add(client) }

    /// A client for `simulator` with fast timings (stagger 10 ms, backoff 5–50 ms, timeout 1 s).
    func configuration(connections: Int = 1) -> APNsClient.Configuration {
        var configuration = APNsClient.Configuration()
        configuration.production = .init(host: "127.0.0.1", port: simulator.productionPort)
        configuration.sandbox = .init(host: "127.0.0.1", port: simulator.sandboxPort)
        configuration.caFile = credentials.path("server-cert.pem")
        configuration.connectionsPerPool = connections
        configuration.connectStagger = .milliseconds(10)
        configuration.requestTimeout = .seconds(1)
        configuration.connectTimeout = .seconds(5)
        configuration.healthCheckInterval = .milliseconds(100)
        configuration.reconnectBackoff = .init(initial: .milliseconds(5), maximum: .milliseconds(100))
        configuration.retry.backoff = .init(initial: .milliseconds(5), maximum: .milliseconds(50))
        configuration.retry.tooManyRequestsDelay = .milliseconds(20)
        configuration.retry.providerTokenUpdateDelay = .milliseconds(5)
        configuration.clock = clock
        // The circuit breaker has tests of its own (CircuitBreakerClientTests); elsewhere one
        // notification's repeated 5xx must not open it.
        configuration.circuitBreaker.failureThreshold = 1_000_000
        return configuration
    }

    func tokenClient(_ configuration: APNsClient.Configuration? = nil, key: Int = 1) throws -> APNsClient {
        APNsClient(configuration: configuration ?? self.configuration(), tokens: try credentials.tokens(key: key, clock: clock),
                   logger: Logger(label: "apns.test", logLevel: .warning))
    }
}

/// Starts a simulator (faults as given), runs `body`, shuts the clients it handed to
/// `Harness.shutdownAtEnd` down, closes the simulator.
func withSimulator<T>(
    faults: APNsSimulatorFaults = APNsSimulatorFaults(),
    configure: (inout APNsSimulator.Configuration) -> Void = { _ in },
    _ body: (Harness) async throws -> T
) async throws -> T {
    ProcessSignals.ignoreSIGPIPE()
    let credentials = try await Credentials.shared.value
    let clock = ManualWallClock(milliseconds: SystemWallClock().nowMilliseconds())
    var configuration = APNsSimulator.Configuration(
        certificateChainFile: credentials.path("server-cert.pem"), privateKeyFile: credentials.path("server-key.pem"),
        trustedKeys: try credentials.trustedKeys())
    configuration.clientCAFile = credentials.path("ca-cert.pem")
    configuration.clock = clock
    configuration.eventLoopCount = 1
    configuration.faults = faults
    configure(&configuration)
    let simulator = try APNsSimulator.start(configuration: configuration)
    defer { simulator.close() }
    let clients = ClientsToShutDown()
    let harness = Harness(simulator: simulator, credentials: credentials, clock: clock, clients: clients)
    return try await withAsyncCleanup { try await body(harness) } cleanup: { await clients.shutDownAll() }
}

/// The clients a test hands to `Harness.shutdownAtEnd`. A shutdown is awaited, never left to a task
/// of its own: such a task could still be closing connections (OpenSSL's objects) when the test
/// process exits after its last test, and crash it during OpenSSL's clean-up at exit.
final class ClientsToShutDown: Sendable {
    private let clients = Mutex<[APNsClient]>([])

    func add(_ client: APNsClient) { clients.withLock { $0.append(client) } }

    /// Shuts every client added down, one after another.
    func shutDownAll() async {
        for client in clients.withLock({ $0 }) { await client.shutdown() }
    }
}

/// A device token: 32 bytes whose hex starts with `index`.
func deviceToken(_ index: Int) -> DeviceToken {
    let prefix = String(format: "%08x", index)
    return try! DeviceToken(validating: prefix + String(repeating: "ab", count: 28))
}

/// An alert request to `com.example.app`.
func alert(_ index: Int = 0, body: String = "hello", expiration: APNsExpiration = .omitted, apnsID: APNsID? = nil) -> APNsRequest {
    APNsRequest(deviceToken: deviceToken(index), topic: Credentials.app, pushType: .alert, expiration: expiration, apnsID: apnsID,
                payload: Array(#"{"aps":{"alert":{"body":"\#(body)"}}}"#.utf8))
}

extension APNsSimulatorRecord {
    /// The value of the first header `name`.
    func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
}

/// Sends `requests` concurrently; returns the results in order.
func sendAll(_ client: APNsClient, _ requests: [APNsRequest], environment: APNsEnvironment = .production) async -> [Result<APNsResponse, any Error>] {
    await withTaskGroup(of: (Int, Result<APNsResponse, any Error>).self) { group in
        for (index, request) in requests.enumerated() {
            group.addTask {
                do { return (index, .success(try await client.send(request, environment: environment))) } catch { return (index, .failure(error)) }
            }
        }
        var results = [Result<APNsResponse, any Error>?](repeating: nil, count: requests.count)
        for await (index, result) in group { results[index] = result }
        return results.map { $0! }
    }
}

/// An `APNsRetryWaiter` that moves the test's manual clock by each delay instead of sleeping, and
/// records the waits: retry horizons are tested in milliseconds of real time.
final class ClockAdvancingWaiter: APNsRetryWaiter {
    struct Wait: Sendable {
        let delay: Duration
        let attemptsSoFar: Int
        let reason: APNsRetryReason
    }

    let clock: ManualWallClock
    private let recorded = Mutex<[Wait]>([])

    init(clock: ManualWallClock) {
        self.clock = clock
    }

    func wait(_ delay: Duration, attemptsSoFar: Int, reason: APNsRetryReason) async throws {
        recorded.withLock { $0.append(Wait(delay: delay, attemptsSoFar: attemptsSoFar, reason: reason)) }
        clock.advance(by: delay)
    }

    var waits: [Wait] { recorded.withLock { $0 } }
}

extension Harness {
    /// Options whose retries end `horizon` after now on the harness clock, waiting through `waiter`.
    func options(_ waiter: ClockAdvancingWaiter, horizon: Duration) -> APNsSendOptions {
        let deadline = Date(timeIntervalSince1970: TimeInterval(clock.nowMilliseconds() + horizon.wholeMilliseconds) / 1000)
        return APNsSendOptions(waiter: waiter, retryDeadline: deadline)
    }
}
