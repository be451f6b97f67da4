import Foundation
import GRPC
import HTTP2
import ProtobufCodec

/// Unary gRPC calls over one HTTP/2 connection (the project's own client and gRPC framing):
/// `POST /package.Service/Method`, `content-type: application/grpc`, `te: trailers`, one
/// length-prefixed message each way, the status in `grpc-status`/`grpc-message` (gRPC over HTTP/2,
/// PROTOCOL-HTTP2.md). An API key travels as `authorization: Bearer KEY`.
struct GRPCUnaryClient: Sendable {
    let connection: HTTP2Connection
    let authority: String
    let apiKey: String?

    /// Connects to `address` (`host:port`).
    /// - Throws: `PushCtlError` (`.unavailable`) when the connection fails, (`.usage`) for a bad address.
    static func connect(address: String, apiKey: String?, tls: HTTP2ClientTLS?) async throws -> GRPCUnaryClient {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else {
            throw PushCtlError(.usage, "registration address \"\(address)\" is not HOST:PORT")
        }
        let host = String(address[..<colon]).trimmingCharacters(in: CharacterSetBrackets.brackets)
        do {
            let connection = try await HTTP2Connection.connect(host: host, port: port, configuration: .init(tls: tls))
            return GRPCUnaryClient(connection: connection, authority: address, apiKey: apiKey)
        } catch {
            throw PushCtlError(.unavailable, "cannot reach the registration service at \(address): \(error)")
        }
    }

    /// Calls `path` with `request`.
    /// - Returns: the decoded response.
    /// - Throws: `GRPCStatus` for a non-OK status, `PushCtlError` (`.unavailable`) when the exchange fails.
    func call<Response: ProtobufMessage>(_ path: String, _ request: some ProtobufMessage, timeout: Duration = .seconds(30)) async throws -> Response {
        var headers = [
            HTTP2Header("content-type", "application/grpc"), HTTP2Header("te", "trailers"),
            HTTP2Header("grpc-timeout", "\(timeout.components.seconds)S"),
        ]
        if let apiKey { headers.append(HTTP2Header("authorization", "Bearer \(apiKey)")) }
        let response: HTTP2Response
        do {
            response = try await connection.send(
                HTTP2Request(method: "POST", path: path, authority: authority, headers: headers, body: GRPCWire.frame(request.serializedBytes())),
                timeout: timeout)
        } catch {
            throw PushCtlError(.unavailable, "\(path): \(error)")
        }
        let fields = response.trailers + response.headers
        let code = fields.first { $0.name == "grpc-status" }.flatMap { Int($0.value) }
        guard response.status == 200, let code else {
            throw GRPCStatus(.unknown, "\(path): HTTP status \(response.status) without grpc-status")
        }
        guard code == 0 else {
            let message = fields.first { $0.name == "grpc-message" }.map { GRPCWire.percentDecode($0.value) } ?? ""
            throw GRPCStatus(GRPCStatus.Code(rawValue: code), message)
        }
        let bytes = try GRPCWire.unframeSingle(response.body, maxSize: 4 << 20)
        return try Response(protobufBytes: bytes)
    }

    func close() async { await connection.close() }
}

/// `[` and `]` around an IPv6 literal.
enum CharacterSetBrackets {
    static let brackets = Foundation.CharacterSet(charactersIn: "[]")
}
