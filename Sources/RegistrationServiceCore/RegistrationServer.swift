import Foundation
import GRPC
import HTTP2
import ProtobufCodec
import PushMessages
import ServiceCore

/// Serves `push.v1.TokenRegistry` over gRPC and, on the same port, as JSON over HTTP/2: a
/// `POST` to the gRPC method path (`/push.v1.TokenRegistry/RegisterToken`) with
/// `content-type: application/json` and the request in proto3 JSON answers 200 with the response in
/// proto3 JSON, or an error status with `{"code": "INVALID_ARGUMENT", "message": "device.device_token: …"}`.
public final class RegistrationServer: Sendable {
    /// The gRPC service name.
    public static let serviceName = "push.v1.TokenRegistry"
    /// Largest request accepted, gRPC message or JSON body, in bytes: larger gRPC messages get
    /// `RESOURCE_EXHAUSTED`, larger JSON bodies 413. 64 KiB is far above any valid registration.
    public static let maximumMessageBytes = 64 << 10

    private let server: GRPCServer

    /// The bound TCP port.
    public var port: Int { server.port }

    /// Starts serving `service` on `configuration.http2`'s address.
    /// - Throws: `HTTP2Error` when the address cannot be bound.
    public static func start(service: TokenRegistryService, configuration: GRPCServer.Configuration) throws -> RegistrationServer {
        var router = GRPCRouter()
        router.register(service: serviceName, method: "RegisterToken") { bytes, context in
            let request = try decodeProtobuf(RegisterTokenRequest.self, bytes)
            do {
                return try await service.register(request, traceParent: context.metadata.first(TraceParent.headerName)).serializedBytes()
            } catch let error as RegistrationError {
                throw GRPCStatus(error.code.grpcCode, error.message, cause: error)
            }
        }
        router.register(service: serviceName, method: "UnregisterToken") { bytes, context in
            let request = try decodeProtobuf(UnregisterTokenRequest.self, bytes)
            do {
                return try await service.unregister(request, traceParent: context.metadata.first(TraceParent.headerName)).serializedBytes()
            } catch let error as RegistrationError {
                throw GRPCStatus(error.code.grpcCode, error.message, cause: error)
            }
        }
        let logger = Logger(label: "registration.json")
        router.fallback = { request, responder in
            Task {
                responder.respond(await handleJSON(request, service: service, logger: logger))
            }
        }
        // Registrations are small: refuse big bodies while they arrive, not after buffering them.
        var configuration = configuration
        configuration.maxReceiveMessageSize = min(configuration.maxReceiveMessageSize, maximumMessageBytes)
        // Bodies up to 1 MiB are read so that gRPC callers get RESOURCE_EXHAUSTED; beyond, HTTP 413.
        configuration.http2.limits.maxRequestBodyBytes = min(configuration.http2.limits.maxRequestBodyBytes, 1 << 20)
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

    private static func decodeProtobuf<M: ProtobufMessage>(_ type: M.Type, _ bytes: [UInt8]) throws(GRPCStatus) -> M {
        do {
            return try M(protobufBytes: bytes)
        } catch {
            throw GRPCStatus(.invalidArgument, "undecodable \(M.protoMessageName): \(error)")
        }
    }

    static func handleJSON(_ request: HTTP2ServerRequest, service: TokenRegistryService, logger: Logger) async -> HTTP2ServerResponse {
        func reply(_ status: Int, _ code: String, _ message: String) -> HTTP2ServerResponse {
            var body = JSONWriter()
            body.beginObject()
            body.writeKey("code")
            body.writeString(code)
            body.writeKey("message")
            body.writeString(message)
            body.endObject()
            return HTTP2ServerResponse(status: status, headers: [HTTP2Header("content-type", "application/json")], body: body.bytes)
        }
        guard request.method == "POST" else { return reply(405, "UNIMPLEMENTED", "use POST") }
        let contentType = request.headers.first("content-type") ?? ""
        guard contentType.lowercased().hasPrefix("application/json") else {
            return reply(415, "UNIMPLEMENTED", "content-type must be application/grpc or application/json")
        }
        guard request.body.count <= maximumMessageBytes else {
            return reply(413, "RESOURCE_EXHAUSTED", "the body is \(request.body.count) bytes; at most \(maximumMessageBytes)")
        }
        do {
            let body: [UInt8]
            switch request.path {
            case "/\(serviceName)/RegisterToken":
                let call = try RegisterTokenRequest(jsonUTF8: request.body)
                body = try await service.register(call, traceParent: request.headers.first(TraceParent.headerName)).jsonUTF8Bytes()
            case "/\(serviceName)/UnregisterToken":
                let call = try UnregisterTokenRequest(jsonUTF8: request.body)
                body = try await service.unregister(call, traceParent: request.headers.first(TraceParent.headerName)).jsonUTF8Bytes()
            default:
                return reply(404, "UNIMPLEMENTED", "no method \(request.path)")
            }
            return HTTP2ServerResponse(status: 200, headers: [HTTP2Header("content-type", "application/json")], body: body)
        } catch let error as ProtobufError {
            return reply(400, "INVALID_ARGUMENT", error.description)
        } catch let error as RegistrationError {
            return reply(error.code.httpStatus, error.code.description, error.message)
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
        default: .internal
        }
    }

    var httpStatus: Int {
        switch self {
        case .invalidArgument: 400
        case .unavailable: 503
        default: 500
        }
    }
}
