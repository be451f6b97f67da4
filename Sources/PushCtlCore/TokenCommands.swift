import Foundation
import Postgres
import ProtobufCodec
import ServiceCore

/// `pushctl token show` and `pushctl token list`: rows of `device_tokens`.
enum TokenCommands {
    /// Runs `body` on a connection to `PUSH_PG_URL` (with `PUSH_PG_PASSWORD_FILE`), closing it after.
    /// - Throws: `PushCtlError` (`.unavailable`) when the database cannot be reached.
    static func withDatabase<T>(_ settings: PushCtlSettings, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        let env = settings.env
        let url = env.string("PUSH_PG_URL", default: "postgresql://postgres@127.0.0.1:54329/push")
        let password: String?
        do {
            password = try env.fileContents("PUSH_PG_PASSWORD_FILE")
        } catch {
            throw PushCtlError(.usage, "\(error)")
        }
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(url, password: password, logger: KafkaTools.quietLogger("postgres"))
        } catch {
            throw settings.withSettingsHint(PushCtlError(.unavailable, "\(error)"), variable: "PUSH_PG_URL", option: "PUSH_PG_URL")
        }
        return try await withAsyncCleanup { try await body(connection) } cleanup: { await connection.close() }
    }

    static let columns = """
        device_token, bundle_id, environment, token_kind, user_id, installation_id, status, inactive_reason,
        inactive_at_ms, last_event_at_ms, registered_at_ms, apns_invalidated_at_ms, attributes::text AS attributes,
        to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated_at
        """

    static func show(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 1)
        guard let raw = arguments.positionals.first else { throw CommandLineArguments.UsageError("a TOKEN argument is required") }
        let token = raw.lowercased().filter { !" <>".contains($0) }
        let rows = try await withDatabase(settings) { connection in
            try await connection.query("SELECT \(columns) FROM device_tokens WHERE device_token = $1", [.string(token)])
        }
        guard !rows.isEmpty else { throw PushCtlError(.notFound, "no token \(token) in device_tokens") }
        for row in rows { print(try render(row, json: arguments.flag("json"))) }
    }

    static func list(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 0)
        let user = try arguments.required("user")
        if arguments.flag("count") {
            let count = try await withDatabase(settings) { connection in
                try await connection.query("SELECT count(*) AS n FROM device_tokens WHERE user_id = $1 AND status = 'active'", [.string(user)]).first?.int("n") ?? 0
            }
            print(count)
            return
        }
        let rows = try await withDatabase(settings) { connection in
            try await connection.query("SELECT \(columns) FROM device_tokens WHERE user_id = $1 ORDER BY updated_at DESC", [.string(user)])
        }
        for row in rows { print(try render(row, json: arguments.flag("json"))) }
    }

    /// One row: `key=value` pairs, or a JSON object.
    static func render(_ row: PostgresRow, json: Bool) throws -> String {
        if json {
            var writer = JSONWriter()
            writer.beginObject()
            for column in row.columnNames {
                writer.writeKey(column)
                if let text = try row.string(column) {
                    if column == "attributes" || column.hasSuffix("_ms") { writer.writeRaw(text) } else { writer.writeString(text) }
                } else {
                    writer.writeRaw("null")
                }
            }
            writer.endObject()
            return String(decoding: writer.bytes, as: UTF8.self)
        }
        return try row.columnNames.map { column in "\(column)=\(try row.string(column) ?? "")" }.joined(separator: " ")
    }
}
