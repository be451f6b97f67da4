import APNs
import Foundation
import HTTP2
import ServiceCore
import Synchronization

/// A stand-in for Apple's APNs servers: one TLS listener per environment speaking HTTP/2 with ALPN
/// `h2`, checking each device-push request the way Apple documents it (apns-reference.md §2–§4), plus
/// an admin API (cleartext HTTP/2, `curl --http2-prior-knowledge`) that shows what was received.
///
/// Start it in-process with `APNsSimulator.start(configuration:)` (ports 0 pick free ports) or run
/// the `apns-simulator` executable.
public final class APNsSimulator: Sendable {
    /// A provider-token key the simulator trusts: Apple's Key ID, the team that owns it and its
    /// public key.
    public struct TrustedKey: Sendable {
        /// The 10-character Key ID (`kid`).
        public var keyID: String
        /// The 10-character Team ID (`iss`).
        public var teamID: String
        /// The P-256 public key in PEM (`-----BEGIN PUBLIC KEY-----`).
        public var publicKeyPEM: String

        public init(keyID: String, teamID: String, publicKeyPEM: String) {
            self.keyID = keyID
            self.teamID = teamID
            self.publicKeyPEM = publicKeyPEM
        }
    }

    /// Where and how the simulator listens.
    public struct Configuration: Sendable {
        /// Address to bind. Default `127.0.0.1`.
        public var host: String = "127.0.0.1"
        /// TLS port of the production listener; 0 picks one. Default 0.
        public var productionPort: Int = 0
        /// TLS port of the sandbox (development) listener; 0 picks one. Default 0.
        public var sandboxPort: Int = 0
        /// Cleartext HTTP/2 port of the admin API; 0 picks one, nil disables it. Default 0.
        public var adminPort: Int? = 0
        /// PEM certificate chain the listeners present.
        public var certificateChainFile: String
        /// PEM private key of that certificate.
        public var privateKeyFile: String
        /// Provider-token keys accepted.
        public var trustedKeys: [TrustedKey]
        /// How many received requests the admin API keeps (oldest dropped first). Default 100,000.
        public var recordLimit: Int = 100_000
        /// The clock that judges JWT age.
        public var clock: any WallClock = SystemWallClock()

        public init(certificateChainFile: String, privateKeyFile: String, trustedKeys: [TrustedKey]) {
            self.certificateChainFile = certificateChainFile
            self.privateKeyFile = privateKeyFile
            self.trustedKeys = trustedKeys
        }
    }

    /// The bound production port.
    public let productionPort: Int
    /// The bound sandbox port.
    public let sandboxPort: Int
    /// The bound admin port, if enabled.
    public let adminPort: Int?

    private let servers: [HTTP2Server]
    private let state: SimulatorState

    private init(productionPort: Int, sandboxPort: Int, adminPort: Int?, servers: [HTTP2Server], state: SimulatorState) {
        self.productionPort = productionPort
        self.sandboxPort = sandboxPort
        self.adminPort = adminPort
        self.servers = servers
        self.state = state
    }

    /// Starts the listeners.
    /// - Throws: `HTTP2Error` when a port cannot be bound or the TLS files cannot be loaded;
    ///   `APNsError` when a trusted key is not a P-256 public key.
    public static func start(configuration: Configuration) throws -> APNsSimulator {
        var keys: [String: APNsPublicKey] = [:]
        var teams: [String: String] = [:]
        for key in configuration.trustedKeys {
            keys[key.keyID] = try APNsPublicKey(pem: key.publicKeyPEM)
            teams[key.keyID] = key.teamID
        }
        let state = SimulatorState(
            verifier: APNsJWTVerifier(publicKeysByKeyID: keys), teamsByKeyID: teams,
            clock: configuration.clock, recordLimit: configuration.recordLimit)
        let tls = HTTP2ServerTLS(
            certificateChainFile: configuration.certificateChainFile, privateKeyFile: configuration.privateKeyFile)
        var servers: [HTTP2Server] = []
        do {
            let production = try HTTP2Server.start(
                configuration: .init(host: configuration.host, port: configuration.productionPort, tls: tls)
            ) { request, responder in
                responder.respond(state.handle(request, environment: .production))
            }
            servers.append(production)
            let sandbox = try HTTP2Server.start(
                configuration: .init(host: configuration.host, port: configuration.sandboxPort, tls: tls)
            ) { request, responder in
                responder.respond(state.handle(request, environment: .sandbox))
            }
            servers.append(sandbox)
            var adminPort: Int?
            if let port = configuration.adminPort {
                var adminConfig = HTTP2Server.Configuration(host: configuration.host, port: port)
                adminConfig.eventLoopCount = 1
                let admin = try HTTP2Server.start(configuration: adminConfig) { request, responder in
                    responder.respond(state.handleAdmin(request))
                }
                servers.append(admin)
                adminPort = admin.port
            }
            return APNsSimulator(
                productionPort: production.port, sandboxPort: sandbox.port, adminPort: adminPort,
                servers: servers, state: state)
        } catch {
            for server in servers { server.close() }
            throw error
        }
    }

    /// What the listeners received, oldest first.
    public func receivedRequests() -> [APNsSimulatorRecord] { state.records() }

    /// Forgets the received requests and counters.
    public func reset() { state.reset() }

    /// Stops listening and closes every connection.
    public func shutdown() async {
        for server in servers { await server.shutdown(gracePeriod: .seconds(1)) }
    }
}
