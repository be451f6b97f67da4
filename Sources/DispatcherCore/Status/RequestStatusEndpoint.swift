import DispatcherStatus
import ProtobufCodec
import PushDomain

/// `GET /v1/requests/<request-id>` on the dispatcher's admin port (README "Request status",
/// docs/campaigns.md "Request status"): the request's `RequestStatusReport.json` with 200, or a JSON
/// error `{"error": CODE, "message": TEXT}`:
///
/// | status | `error` | when |
/// |---|---|---|
/// | 400 | `invalid_argument` | the id is empty, longer than a request id may be, or has a control character (the rule `SendRequest.request_id` follows) |
/// | 404 | `not_found` | PostgreSQL knows no such request (never consumed, an immediate request not yet handled, or past its retention) |
/// | 503 | `unavailable` | PostgreSQL failed or is not connected yet |
///
/// The decision is made here without I/O; `lookup` does the reading.
public enum RequestStatusEndpoint {
    /// The route's path prefix; the rest of the path is the request id (percent-decoded).
    public static let pathPrefix = "/v1/requests/"

    /// An HTTP answer: status code and JSON body (one line).
    public struct Answer: Sendable, Equatable {
        /// HTTP status code.
        public var status: Int
        /// The JSON body.
        public var body: String
    }

    /// The answer for `requestID`.
    /// - Parameters:
    ///   - requestID: the path after `pathPrefix`.
    ///   - lookup: reads the status from PostgreSQL (`RequestStatusReader`); nil when unknown; throws
    ///     when the database fails.
    public static func answer(requestID: String, lookup: (String) async throws -> RequestStatusReport?) async -> Answer {
        guard !requestID.isEmpty else {
            return error(400, "invalid_argument", "request id: is required (GET \(pathPrefix)<request-id>)")
        }
        do {
            try DeviceValidator.checkIdentifier(requestID, field: "request id")
        } catch {
            return Self.error(400, "invalid_argument", error.description)
        }
        do {
            guard let report = try await lookup(requestID) else {
                return error(404, "not_found",
                             "no request \(requestID) in PostgreSQL (not consumed yet, never sent, or past its retention)")
            }
            return Answer(status: 200, body: report.json)
        } catch {
            return Self.error(503, "unavailable", "PostgreSQL: \(error)")
        }
    }

    /// A JSON error answer.
    static func error(_ status: Int, _ code: String, _ message: String) -> Answer {
        var writer = JSONWriter()
        writer.beginObject()
        writer.writeKey("error")
        writer.writeString(code)
        writer.writeKey("message")
        writer.writeString(message)
        writer.endObject()
        return Answer(status: status, body: String(decoding: writer.bytes, as: UTF8.self))
    }
}
