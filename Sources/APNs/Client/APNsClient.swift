import Foundation
import HTTP2
import ServiceCore
import Synchronization

/// Sends device pushes to APNs over HTTP/2 + TLS with token (JWT) authentication.
///
/// This first version keeps one connection per environment, opened on first use and replaced when
/// it becomes unusable (GOAWAY, reset, closed). The connection pool with stream accounting, retries
/// and health checks replaces it (see the APNs client issue); the API stays the same.
public final class APNsClient: Sendable {
    /// Where the client connects and how.
    public struct Configuration: Sendable {
        /// An APNs endpoint: host and TCP port.
        public struct Endpoint: Sendable, Hashable {
            public var host: String
            public var port: Int
            public init(host: String, port: Int) {
                self.host = host
                self.port = port
            }

            /// Parses `https://host:port` (port defaults to 443).
            /// - Throws: `APNsError` `.invalidConfiguration` naming the URL when it cannot be parsed.
            public init(url: String) throws(APNsError) {
                guard let components = URLComponents(string: url), components.scheme == "https",
                      let host = components.host, !host.isEmpty
                else { throw APNsError(code: .invalidConfiguration, message: "APNs URL \"\(url)\" is not https://host[:port]") }
                self.init(host: host, port: components.port ?? 443)
            }
        }

        /// `api.push.apple.com:443` unless overridden (apns-reference.md §1).
        public var production = Endpoint(host: APNsEnvironment.production.host, port: 443)
        /// `api.sandbox.push.apple.com:443` unless overridden.
        public var sandbox = Endpoint(host: APNsEnvironment.sandbox.host, port: 443)
        /// PEM file of CA certificates to trust; nil uses the system trust store.
        public var caFile: String?
        /// How long one request may wait for its answer before its stream is reset. Default 30 s.
        public var requestTimeout: Duration = .seconds(30)
        /// How long connecting (TCP + TLS) may take. Default 10 s.
        public var connectTimeout: Duration = .seconds(10)

        public init() {}

        func endpoint(for environment: APNsEnvironment) -> Endpoint {
            environment == .production ? production : sandbox
        }
    }

    private let configuration: Configuration
    private let tokens: APNsProviderTokenCache
    private let connections: ConnectionSlots
    private let logger: Logger

    /// Creates a client that signs with `tokens`' key.
    public init(configuration: Configuration, tokens: APNsProviderTokenCache, logger: Logger = Logger(label: "apns.client")) {
        self.configuration = configuration
        self.tokens = tokens
        self.logger = logger
        self.connections = ConnectionSlots()
    }

    /// Sends one notification and returns Apple's answer.
    ///
    /// Call `APNsNotificationValidator.validate(_:)` first: this method sends what it is given.
    /// - Throws: `APNsError` `.signingFailed` when no JWT can be made; `HTTP2Error` when the
    ///   connection cannot be opened or fails before the answer arrives (check `isRetryable`).
    public func send(_ request: APNsRequest, environment: APNsEnvironment) async throws -> APNsResponse {
        let jwt = try tokens.currentToken()
        let connection = try await connection(for: environment)
        var headers: [HTTP2Header] = []
        for (name, value) in request.headers(providerToken: jwt) where !name.hasPrefix(":") {
            headers.append(HTTP2Header(name, value))
        }
        let endpoint = configuration.endpoint(for: environment)
        let http2Request = HTTP2Request(
            method: "POST", path: request.path, authority: "\(endpoint.host):\(endpoint.port)",
            headers: headers, body: request.payload)
        let response = try await connection.send(http2Request, timeout: configuration.requestTimeout)
        let answer = APNsResponse(status: response.status, headers: response.headers, body: response.body)
        if answer.reason == .expiredProviderToken { tokens.invalidate(jwt) }
        return answer
    }

    /// Closes every connection.
    public func shutdown() async {
        for connection in connections.removeAll() { await connection.close() }
    }

    private func connection(for environment: APNsEnvironment) async throws -> HTTP2Connection {
        if let existing = connections.get(environment), existing.isUsable { return existing }
        let endpoint = configuration.endpoint(for: environment)
        var http2 = HTTP2Connection.Configuration(tls: HTTP2ClientTLS(caFile: configuration.caFile, serverName: endpoint.host))
        http2.connectTimeout = configuration.connectTimeout
        logger.info("connecting to APNs", ["environment": environment.rawValue, "host": endpoint.host, "port": "\(endpoint.port)"])
        let connection = try await HTTP2Connection.connect(host: endpoint.host, port: endpoint.port, configuration: http2)
        if let replaced = connections.set(environment, connection) { await replaced.close() }
        return connection
    }
}

/// The current connection per environment.
private final class ConnectionSlots: Sendable {
    private let slots = Mutex<[APNsEnvironment: HTTP2Connection]>([:])

    func get(_ environment: APNsEnvironment) -> HTTP2Connection? { slots.withLock { $0[environment] } }

    /// Stores `connection`, returning the one it replaced.
    func set(_ environment: APNsEnvironment, _ connection: HTTP2Connection) -> HTTP2Connection? {
        slots.withLock { slots in
            let old = slots[environment]
            slots[environment] = connection
            return old === connection ? nil : old
        }
    }

    func removeAll() -> [HTTP2Connection] {
        slots.withLock { slots in
            defer { slots.removeAll() }
            return Array(slots.values)
        }
    }
}
