import Foundation
import HTTP2
import ProtobufCodec

/// `pushctl sim …`: the APNs simulator's admin API (cleartext HTTP/2 with prior knowledge).
enum SimulatorCommands {
    static func run(_ command: PushCtlCommand, _ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        let base = arguments.value("sim") ?? settings.env.string("PUSH_SIM_ADMIN_URL", default: "http://127.0.0.1:8081")
        let request: (method: String, path: String, body: String?)
        switch command.name {
        case "sim faults":
            try arguments.expectPositionals(atMost: 1)
            let sources = [arguments.positionals.first != nil, arguments.value("file") != nil, arguments.flag("clear")].filter { $0 }.count
            if sources > 1 { throw CommandLineArguments.UsageError("give the faults as one of: a JSON argument, --file, --clear") }
            if let json = arguments.positionals.first {
                request = ("PUT", "/admin/faults", json)
            } else if let path = arguments.value("file") {
                guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw CommandLineArguments.UsageError("option --file: cannot read \(path)") }
                request = ("PUT", "/admin/faults", text)
            } else if arguments.flag("clear") {
                request = ("PUT", "/admin/faults", "{}")
            } else {
                request = ("GET", "/admin/faults", nil)
            }
            if let body = request.body {
                do { _ = try JSONValue(parsing: Array(body.utf8)) } catch { throw CommandLineArguments.UsageError("the faults are not JSON: \(error)") }
            }
        case "sim counters":
            try arguments.expectPositionals(atMost: 0)
            request = ("GET", "/admin/counters", nil)
        case "sim reset":
            try arguments.expectPositionals(atMost: 0)
            request = ("POST", "/admin/reset", nil)
        case "sim unregister":
            try arguments.expectPositionals(atMost: 1)
            guard let token = arguments.positionals.first else { throw CommandLineArguments.UsageError("a TOKEN argument is required") }
            var writer = JSONWriter()
            writer.beginObject()
            writer.writeKey("token")
            writer.writeString(token)
            writer.endObject()
            request = ("POST", "/admin/tokens/unregistered", String(decoding: writer.bytes, as: UTF8.self))
        default:
            throw CommandLineArguments.UsageError("unknown command \(command.name)")
        }
        print(try await call(base: base, request.method, request.path, body: request.body))
    }

    /// One admin call; the answer's body.
    /// - Throws: `PushCtlError` (`.unavailable`) when the simulator cannot be reached, (`.failed`) for an
    ///   error status, (`.usage`) for a bad URL.
    static func call(base: String, _ method: String, _ path: String, body: String?) async throws -> String {
        guard let url = URLComponents(string: base), url.scheme == "http", let host = url.host else {
            throw PushCtlError(.usage, "simulator admin URL \"\(base)\" is not http://host:port")
        }
        let port = url.port ?? 80
        let connection: HTTP2Connection
        do {
            connection = try await HTTP2Connection.connect(host: host, port: port)
        } catch {
            throw PushCtlError(.unavailable, "cannot reach the simulator's admin API at \(base): \(error)")
        }
        let response: HTTP2Response
        do {
            var headers: [HTTP2Header] = []
            if body != nil { headers.append(HTTP2Header("content-type", "application/json")) }
            response = try await connection.send(
                HTTP2Request(method: method, path: path, authority: "\(host):\(port)", headers: headers, body: Array((body ?? "").utf8)),
                timeout: .seconds(30))
        } catch {
            await connection.close()
            throw PushCtlError(.unavailable, "\(method) \(path): \(error)")
        }
        await connection.close()
        let text = String(decoding: response.body, as: UTF8.self)
        guard (200..<300).contains(response.status) else { throw PushCtlError(.failed, "\(method) \(path): HTTP \(response.status): \(text)") }
        return text
    }
}
