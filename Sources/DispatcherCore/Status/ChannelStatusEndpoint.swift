import ProtobufCodec
import PushDomain
import PushMessages

/// `GET /v1/channels/<bundle id>/<name>` and `GET /v1/channels/<bundle id>` on the dispatcher's admin
/// port (README "Live Activity broadcast channels"): the app's `channels` rows as JSON
/// `{"channels": [ROW, …]}`, each row
/// `{"bundle_id", "name", "environment" ("production"|"sandbox"), "channel_id" (Apple's, "" until
/// created), "state" (creating|active|deleting|deleted|failed), "message_storage_policy"
/// (NO_MESSAGE_STORED|MOST_RECENT_MESSAGE_STORED), "created_at_ms", "updated_at_ms", "delete_at_ms"
/// (0: never)}`. One name may have a row in each environment: production comes first.
///
/// The list is capped, not paged: the first `listLimit` rows in name order, with `"truncated": true`
/// when there are more. Errors are `{"error": CODE, "message": TEXT}`:
///
/// | status | `error` | when |
/// |---|---|---|
/// | 400 | `invalid_argument` | the bundle id or the name breaks its rule (named), or the path has more parts |
/// | 404 | `not_found` | no row has the name in either environment (named) |
/// | 503 | `unavailable` | PostgreSQL failed or is not connected yet |
public enum ChannelStatusEndpoint {
    /// The route's path prefix; the rest is `<bundle id>` or `<bundle id>/<name>`.
    public static let pathPrefix = "/v1/channels/"
    /// The most rows the list answers.
    public static let listLimit = 1_000

    /// Reads what the endpoint serves (`ChannelStore`).
    public struct Lookup: Sendable {
        /// The rows of (bundle id, name), both environments.
        public var named: @Sendable (_ bundleID: String, _ name: String) async throws -> [ChannelRow]
        /// The first `limit` rows of the app in name order.
        public var list: @Sendable (_ bundleID: String, _ limit: Int) async throws -> [ChannelRow]

        /// The look-ups of `store`.
        public init(store: ChannelStore) {
            named = { try await store.rows(bundleID: $0, name: $1) }
            list = { try await store.rows(bundleID: $0, limit: $1) }
        }
    }

    /// The answer for the path after `pathPrefix`.
    /// - Parameter lookup: the reads; nil when PostgreSQL is not connected (503).
    public static func answer(path rest: String, lookup: Lookup?) async -> RequestStatusEndpoint.Answer {
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count <= 2 else {
            return RequestStatusEndpoint.error(400, "invalid_argument", "path: GET \(pathPrefix)<bundle id> or \(pathPrefix)<bundle id>/<name>")
        }
        let bundleID = parts[0]
        do {
            try DeviceValidator.checkBundleID(bundleID, field: "bundle id")
            if parts.count == 2 { try ChannelCommand.checkName(parts[1]) }
        } catch {
            return RequestStatusEndpoint.error(400, "invalid_argument", error.description)
        }
        guard let lookup else {
            return RequestStatusEndpoint.error(503, "unavailable", "PostgreSQL: not connected (the dispatcher is starting or stopping)")
        }
        do {
            if parts.count == 2 {
                let rows = try await lookup.named(bundleID, parts[1])
                guard !rows.isEmpty else {
                    return RequestStatusEndpoint.error(404, "not_found", "no channel \"\(parts[1])\" of \(bundleID) in either environment")
                }
                return .init(status: 200, body: json(rows, truncated: false))
            }
            let rows = try await lookup.list(bundleID, listLimit + 1)
            return .init(status: 200, body: json(Array(rows.prefix(listLimit)), truncated: rows.count > listLimit))
        } catch {
            return RequestStatusEndpoint.error(503, "unavailable", "PostgreSQL: \(error)")
        }
    }

    /// `{"channels": [...]}` (and `"truncated": true` when the list was cut).
    static func json(_ rows: [ChannelRow], truncated: Bool) -> String {
        var writer = JSONWriter()
        writer.beginObject()
        writer.writeKey("channels")
        writer.beginArray()
        for row in rows {
            writer.beginObject()
            writer.writeKey("bundle_id")
            writer.writeString(row.bundleID)
            writer.writeKey("name")
            writer.writeString(row.name)
            writer.writeKey("environment")
            writer.writeString(ChannelStore.stored(row.environment))
            writer.writeKey("channel_id")
            writer.writeString(row.channelID ?? "")
            writer.writeKey("state")
            writer.writeString(row.state.rawValue)
            writer.writeKey("message_storage_policy")
            writer.writeString(row.storagePolicy.protoName ?? "NO_MESSAGE_STORED")
            for (key, value) in [("created_at_ms", row.createdAtMs), ("updated_at_ms", row.updatedAtMs), ("delete_at_ms", row.deleteAtMs ?? 0)] {
                writer.writeKey(key)
                writer.writeNumber(String(value))
            }
            writer.endObject()
        }
        writer.endArray()
        if truncated {
            writer.writeKey("truncated")
            writer.writeRaw("true")
        }
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }
}
