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
        // Each method gets its request undecoded: the credential is checked before anything the
        // caller sent is parsed (docs/registration-auth.md "Errors").
        router.register(undecoded: TokenRegistry.RegisterToken.self) { bytes, context in
            try await methods.grpc(context, .register, decode: { () throws(RegistrationError) in try Methods.protobuf(RegisterTokenRequest.self, bytes) }) {
                principal, request, _ throws(RegistrationError) in
                try await service.register(request, as: principal, traceParent: context.metadata.first(TraceParent.headerName))
            }
        }
        router.register(undecoded: TokenRegistry.UnregisterToken.self) { bytes, context in
            try await methods.grpc(context, .unregister, decode: { () throws(RegistrationError) in try Methods.protobuf(UnregisterTokenRequest.self, bytes) }) {
                principal, request, _ throws(RegistrationError) in
                try await service.unregister(request, as: principal, traceParent: context.metadata.first(TraceParent.headerName))
            }
        }
        router.register(undecoded: TokenRegistry.BatchRegisterTokens.self) { bytes, context in
            try await methods.grpc(
                context, .register, batch: true,
                decode: { () throws(RegistrationError) in try Methods.protobuf(BatchRegisterTokensRequest.self, bytes) }
            ) { principal, request, admission throws(RegistrationError) in
                try await service.batchRegister(request, as: principal, admission: admission, traceParent: context.metadata.first(TraceParent.headerName))
            }
        }
        router.register(undecoded: TokenRegistry.ForgetUser.self) { bytes, context in
            try await methods.grpc(context, .admin, decode: { () throws(RegistrationError) in try Methods.protobuf(ForgetUserRequest.self, bytes) }) {
                principal, request, _ throws(RegistrationError) in
                try await service.forgetUser(request, as: principal, traceParent: context.metadata.first(TraceParent.headerName))
            }
        }
        health.register(into: &router)
        try GRPCReflectionService(
            descriptorSet: PushDescriptorSet.bytes,
            services: [TokenRegistry.serviceName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                       "grpc.reflection.v1alpha.ServerReflection"]
        ).register(into: &router)
        let logger = Logger(label: "registration.json")
        router.fallback = { request in await handleJSON(request, methods: methods, logger: logger) }
        var configuration = configuration
        configuration.maxReceiveMessageSize = min(configuration.maxReceiveMessageSize, maximumMessageBytes)
        // Bodies up to 2 MiB are read so that gRPC callers get RESOURCE_EXHAUSTED; beyond, HTTP 413.
        configuration.http2.limits.maxRequestBodyBytes = min(configuration.http2.limits.maxRequestBodyBytes, 2 << 20)
        return RegistrationServer(server: try GRPCServer.start(configuration: configuration, router: router))
    }

    private init(server: GRPCServer) {
        self.server = server
    }

    /// Runs the calls, gRPC and JSON, as children of this call's task group until `shutdown` or
    /// `close` ended the server (`GRPCServer.serve()`). Call it once, beside the code that shuts the
    /// server down.
    public func serve() async {
        await server.serve()
    }

    /// Stops accepting calls (GOAWAY to every connection) and lets calls in progress finish within
    /// `gracePeriod`; then drops what is left and ends `serve()`.
    public func shutdown(gracePeriod: Duration = .seconds(5)) async {
        await server.shutdown(gracePeriod: gracePeriod)
    }

    /// Drops every connection at once, abandoning calls in progress (escalated shutdown), and ends
    /// `serve()`, which cancels them.
    public func close() {
        server.close()
    }

    /// Authentication around each method, shared by the gRPC and JSON routes, in this order:
    /// the credential (UNAUTHENTICATED), then the request is decoded (INVALID_ARGUMENT), a batch
    /// method checked to be an API key's (PERMISSION_DENIED), and the items taken from the caller's
    /// rate limits (RESOURCE_EXHAUSTED when none may go).
    struct Methods: Sendable {
        let service: TokenRegistryService
        let authenticator: RegistrationAuthenticator

        func authenticated<Input, Output>(
            _ authorization: String?, _ operation: RegistrationOperation, batch: Bool = false,
            decode: () throws(RegistrationError) -> Input,
            _ body: (RegistrationPrincipal, Input, RegistrationAuthenticator.RateAdmission) async throws(RegistrationError) -> Output
        ) async throws(RegistrationError) -> Output {
            let principal: RegistrationPrincipal
            let input: Input
            let admission: RegistrationAuthenticator.RateAdmission
            do {
                principal = try authenticator.authenticate(authorization: authorization)
                input = try decode()
                var items = 1
                if batch {
                    try principal.authorizeBatch()
                    if let request = input as? BatchRegisterTokensRequest { items = try TokenRegistryService.batchItems(request) }
                }
                admission = try authenticator.admit(principal, items: items)
            } catch {
                service.recordRefused(error, operation: operation)
                throw error
            }
            return try await body(principal, input, admission)
        }

        func grpc<Input, Output>(
            _ context: GRPCContext, _ operation: RegistrationOperation, batch: Bool = false,
            decode: () throws(RegistrationError) -> Input,
            _ body: (RegistrationPrincipal, Input, RegistrationAuthenticator.RateAdmission) async throws(RegistrationError) -> Output
        ) async throws(GRPCStatus) -> Output {
            do {
                return try await authenticated(context.metadata.first("authorization"), operation, batch: batch, decode: decode, body)
            } catch {
                var status = GRPCStatus(error.code.grpcCode, error.message, cause: error)
                if let retryAfter = error.retryAfter {
                    status.metadata = [HTTP2Header("retry-after-ms", String(retryAfter.wholeMilliseconds))]
                }
                throw status
            }
        }

        /// A gRPC request message, decoded; INVALID_ARGUMENT naming the message when it is not one.
        static func protobuf<M: ProtobufMessage>(_ type: M.Type, _ bytes: [UInt8]) throws(RegistrationError) -> M {
            do {
                return try M(protobufBytes: bytes)
            } catch {
                throw RegistrationError(code: .invalidArgument, message: "undecodable \(M.protoMessageName): \(error)", cause: error)
            }
        }

        /// A JSON request body, decoded (proto3 JSON); INVALID_ARGUMENT with the parser's message.
        static func json<M: ProtobufMessage>(_ type: M.Type, _ bytes: [UInt8]) throws(RegistrationError) -> M {
            do {
                return try M(jsonUTF8: bytes)
            } catch {
                throw RegistrationError(code: .invalidArgument, message: "\(error)", cause: error)
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
        let traceParent = request.headers.first(TraceParent.headerName)
        let requestBody = request.body
        do {
            let body: [UInt8]
            switch request.path {
            case TokenRegistry.RegisterToken.path:
                body = try await methods.authenticated(authorization, .register, decode: { () throws(RegistrationError) in try Methods.json(RegisterTokenRequest.self, requestBody) }) {
                    principal, call, _ throws(RegistrationError) in
                    try await methods.service.register(call, as: principal, traceParent: traceParent)
                }.jsonUTF8Bytes()
            case TokenRegistry.UnregisterToken.path:
                body = try await methods.authenticated(authorization, .unregister, decode: { () throws(RegistrationError) in try Methods.json(UnregisterTokenRequest.self, requestBody) }) {
                    principal, call, _ throws(RegistrationError) in
                    try await methods.service.unregister(call, as: principal, traceParent: traceParent)
                }.jsonUTF8Bytes()
            case TokenRegistry.BatchRegisterTokens.path:
                body = try await methods.authenticated(
                    authorization, .register, batch: true, decode: { () throws(RegistrationError) in try Methods.json(BatchRegisterTokensRequest.self, requestBody) }
                ) { principal, call, admission throws(RegistrationError) in
                    try await methods.service.batchRegister(call, as: principal, admission: admission, traceParent: traceParent)
                }.jsonUTF8Bytes()
            case TokenRegistry.ForgetUser.path:
                body = try await methods.authenticated(authorization, .admin, decode: { () throws(RegistrationError) in try Methods.json(ForgetUserRequest.self, requestBody) }) {
                    principal, call, _ throws(RegistrationError) in
                    try await methods.service.forgetUser(call, as: principal, traceParent: traceParent)
                }.jsonUTF8Bytes()
            default:
                return reply(404, "UNIMPLEMENTED", "no method \(request.path)")
            }
            return HTTP2ServerResponse(status: 200, headers: [HTTP2Header("content-type", "application/json")], body: body)
        } catch {
            if error.code == .internalError { logger.error("JSON call failed", ["error": "\(error)"]) }
            return reply(error.code.httpStatus, error.code.description, error.message, retryAfter: error.retryAfter)
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
