import Foundation
import GRPC
import HTTP2
import ProtobufCodec
import PushMessages
import ServiceCore

/// Serves `push.v1.TokenRegistry` over gRPC and, on the same port, as JSON over HTTP/2: a
/// `POST` to the gRPC method path (`/push.v1.TokenRegistry/RegisterToken`) with
/// `content-type: application/json` and the request in proto3 JSON answers 200 with the response in
/// proto3 JSON, or an error status with `{"code": "INVALID_ARGUMENT", "message": "device.device_token: …"}`
/// (401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 429 RESOURCE_EXHAUSTED with `retry-after`).
///
/// Beside it, unauthenticated: `grpc.health.v1.Health` (Check, Watch) and server reflection
/// (`grpc.reflection.v1` and `v1alpha`) from `PushDescriptorSet`. Routes come from the generated method
/// descriptors (`TokenRegistry.RegisterToken.path`, …).
public final class RegistrationServer: Sendable {
    /// The gRPC service name.
    public static let serviceName = TokenRegistry.serviceName
    /// Largest request accepted, gRPC message or JSON body, in bytes: larger gRPC messages get
    /// `RESOURCE_EXHAUSTED`, larger JSON bodies 413. 1 MiB: a batch of 500 registrations fits.
    public static let maximumMessageBytes = 1 << 20

    private let server: GRPCServer

    /// The bound TCP port.
    public var port: Int { server.port }

    /// Starts serving `service` on `configuration.http2`'s address.
    /// - Parameters:
    ///   - service: the registry logic.
    ///   - authenticator: checks each TokenRegistry call's `authorization` metadata.
    ///   - health: the health service to serve (its status is the caller's to set).
    ///   - configuration: address, TLS and limits.
    /// - Throws: `HTTP2Error` when the address cannot be bound, `ProtobufError` when the embedded
    ///   descriptor set cannot be read (a build defect).
    public static func start(
        service: TokenRegistryService, authenticator: RegistrationAuthenticator, health: GRPCHealthService,
        configuration: GRPCServer.Configuration
    ) throws -> RegistrationServer {
        var router = GRPCRouter()
        let methods = Methods(service: service, authenticator: authenticator)
        router.register(TokenRegistry.RegisterToken.self) { request, context in
            try await methods.grpc(context, .register) { principal throws(RegistrationError) in try await service.register(request, as: principal, traceParent: context.metadata.first(TraceParent.headerName)) }
        }
        router.register(TokenRegistry.UnregisterToken.self) { request, context in
            try await methods.grpc(context, .unregister) { principal throws(RegistrationError) in try await service.unregister(request, as: principal, traceParent: context.metadata.first(TraceParent.headerName)) }
        }
        router.register(TokenRegistry.BatchRegisterTokens.self) { request, context in
            try await methods.grpc(context, .register) { principal throws(RegistrationError) in try await service.batchRegister(request, as: principal, traceParent: context.metadata.first(TraceParent.headerName)) }
        }
        router.register(TokenRegistry.ForgetUser.self) { request, context in
            try await methods.grpc(context, .admin) { principal throws(RegistrationError) in try await service.forgetUser(request, as: principal, traceParent: context.metadata.first(TraceParent.headerName)) }
        }
        health.register(into: &router)
        try GRPCReflectionService(
            descriptorSet: PushDescriptorSet.bytes,
            services: [TokenRegistry.serviceName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                       "grpc.reflection.v1alpha.ServerReflection"]
        ).register(into: &router)
        let logger = Logger(label: "registration.json")
        router.fallback = { request, responder in
            Task {
                responder.respond(await handleJSON(request, methods: methods, logger: logger))
            }
        }
        var configuration = configuration
        configuration.maxReceiveMessageSize = min(configuration.maxReceiveMessageSize, maximumMessageBytes)
        // Bodies up to 2 MiB are read so that gRPC callers get RESOURCE_EXHAUSTED; beyond, HTTP 413.
        configuration.http2.limits.maxRequestBodyBytes = min(configuration.http2.limits.maxRequestBodyBytes, 2 << 20)
        return RegistrationServer(server: try GRPCServer.start(configuration: configuration, router: router))
    }

    private init(server: GRPCServer) {
        self.server = server
    }

    /// Stops accepting calls (GOAWAY to every connection) and lets calls in progress finish within
    /// `gracePeriod`; then drops what is left.
    public func shutdown(gracePeriod: Duration = .seconds(5)) async {
        await server.shutdown(gracePeriod: gracePeriod)
    }

    /// Drops every connection at once, abandoning calls in progress (escalated shutdown).
    public func close() {
        server.close()
    }

    /// Authentication around each method, shared by the gRPC and JSON routes.
    struct Methods: Sendable {
        let service: TokenRegistryService
        let authenticator: RegistrationAuthenticator

        func authenticated<Output>(
            _ authorization: String?, _ operation: RegistrationOperation,
            _ body: (RegistrationPrincipal) async throws(RegistrationError) -> Output
        ) async throws(RegistrationError) -> Output {
            let principal: RegistrationPrincipal
            do {
                principal = try authenticator.authenticate(authorization: authorization)
            } catch {
                service.recordRefused(error, operation: operation)
                throw error
            }
            return try await body(principal)
        }

        func grpc<Output>(
            _ context: GRPCContext, _ operation: RegistrationOperation,
            _ body: (RegistrationPrincipal) async throws(RegistrationError) -> Output
        ) async throws(GRPCStatus) -> Output {
            do {
                return try await authenticated(context.metadata.first("authorization"), operation, body)
            } catch {
                var status = GRPCStatus(error.code.grpcCode, error.message, cause: error)
                if let retryAfter = error.retryAfter {
                    status.metadata = [HTTP2Header("retry-after-ms", String(retryAfter.wholeMilliseconds))]
                }
                throw status
            }
        }
    }

    static func handleJSON(_ request: HTTP2ServerRequest, methods: Methods, logger: Logger) async -> HTTP2ServerResponse {
        func reply(_ status: Int, _ code: String, _ message: String, retryAfter: Duration? = nil) -> HTTP2ServerResponse {
            var body = JSONWriter()
            body.beginObject()
            body.writeKey("code")
            body.writeString(code)
            body.writeKey("message")
            body.writeString(message)
            var headers = [HTTP2Header("content-type", "application/json")]
            if let retryAfter {
                body.writeKey("retry_after_ms")
                body.writeString(String(retryAfter.wholeMilliseconds))
                // RFC 9110 §10.2.3: whole seconds, rounded up so that a retry at that time succeeds.
                headers.append(HTTP2Header("retry-after", String(max(1, (retryAfter.wholeMilliseconds + 999) / 1000))))
            }
            body.endObject()
            return HTTP2ServerResponse(status: status, headers: headers, body: body.bytes)
        }
        guard request.method == "POST" else { return reply(405, "UNIMPLEMENTED", "use POST") }
        let contentType = request.headers.first("content-type") ?? ""
        guard contentType.lowercased().hasPrefix("application/json") else {
            return reply(415, "UNIMPLEMENTED", "content-type must be application/grpc or application/json")
        }
        guard request.body.count <= maximumMessageBytes else {
            return reply(413, "RESOURCE_EXHAUSTED", "the body is \(request.body.count) bytes; at most \(maximumMessageBytes)")
        }
        let authorization = request.headers.first("authorization")
        do {
            let body: [UInt8]
            switch request.path {
            case TokenRegistry.RegisterToken.path:
                let call = try RegisterTokenRequest(jsonUTF8: request.body)
                body = try await methods.authenticated(authorization, .register) { principal throws(RegistrationError) in
                    try await methods.service.register(call, as: principal, traceParent: request.headers.first(TraceParent.headerName))
                }.jsonUTF8Bytes()
            case TokenRegistry.UnregisterToken.path:
                let call = try UnregisterTokenRequest(jsonUTF8: request.body)
                body = try await methods.authenticated(authorization, .unregister) { principal throws(RegistrationError) in
                    try await methods.service.unregister(call, as: principal, traceParent: request.headers.first(TraceParent.headerName))
                }.jsonUTF8Bytes()
            case TokenRegistry.BatchRegisterTokens.path:
                let call = try BatchRegisterTokensRequest(jsonUTF8: request.body)
                body = try await methods.authenticated(authorization, .register) { principal throws(RegistrationError) in
                    try await methods.service.batchRegister(call, as: principal, traceParent: request.headers.first(TraceParent.headerName))
                }.jsonUTF8Bytes()
            case TokenRegistry.ForgetUser.path:
                let call = try ForgetUserRequest(jsonUTF8: request.body)
                body = try await methods.authenticated(authorization, .admin) { principal throws(RegistrationError) in
                    try await methods.service.forgetUser(call, as: principal, traceParent: request.headers.first(TraceParent.headerName))
                }.jsonUTF8Bytes()
            default:
                return reply(404, "UNIMPLEMENTED", "no method \(request.path)")
            }
            return HTTP2ServerResponse(status: 200, headers: [HTTP2Header("content-type", "application/json")], body: body)
        } catch let error as ProtobufError {
            return reply(400, "INVALID_ARGUMENT", error.description)
        } catch let error as RegistrationError {
            return reply(error.code.httpStatus, error.code.description, error.message, retryAfter: error.retryAfter)
        } catch {
            logger.error("JSON call failed", ["error": "\(error)"])
            return reply(500, "INTERNAL", "internal error")
        }
    }
}

extension RegistrationError.Code {
    var grpcCode: GRPCStatus.Code {
        switch self {
        case .invalidArgument: .invalidArgument
        case .unavailable: .unavailable
        case .unauthenticated: .unauthenticated
        case .permissionDenied: .permissionDenied
        case .resourceExhausted: .resourceExhausted
        default: .internal
        }
    }

    var httpStatus: Int {
        switch self {
        case .invalidArgument: 400
        case .unavailable: 503
        case .unauthenticated: 401
        case .permissionDenied: 403
        case .resourceExhausted: 429
        default: 500
        }
    }
}
