import APNs
import Foundation
import HTTP2
import ProtobufCodec
import PushDomain
import ServiceCore

/// The admin API's routes (documented on `APNsSimulator`). Runs on the admin listener's single
/// event-loop thread; Foundation JSON is fine here, it is not the push path.
struct AdminAPI: Sendable {
    let state: SimulatorState

    func handle(_ request: HTTP2ServerRequest) -> HTTP2ServerResponse {
        let pathAndQuery = request.path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let route = pathAndQuery.first.map(String.init) ?? request.path
        do {
            switch (request.method, route) {
            case ("GET", "/admin/requests"):
                let query = try RecordQuery(query: pathAndQuery.count == 2 ? pathAndQuery[1] : nil)
                return ok(["requests": query.apply(to: state.recorder.records()).map(\.jsonObject)])
            case ("GET", "/admin/counters"):
                let (counters, total) = state.recorder.counters()
                return ok(["counters": counters, "total": total])
            case ("POST", "/admin/reset"):
                state.reset()
                return ok(["reset": true])
            case ("GET", "/admin/faults"):
                return ok(state.faults.jsonObject)
            case ("PUT", "/admin/faults"):
                let faults = try APNsSimulatorFaults(jsonObject: try body(request))
                state.setFaults(faults)
                return ok(faults.jsonObject)
            case ("GET", "/admin/held"):
                let held = state.held.withLock { $0 }.map { answer -> [String: Any] in
                    ["token": answer.token, "environment": answer.environment.rawValue,
                     "connection": answer.connectionID, "stream": answer.streamID, "status": answer.status]
                }
                return ok(["held": held])
            case ("POST", "/admin/held/release"):
                var reader = JSONReader(try body(request, allowEmpty: true), path: "body")
                let token = try reader.string("token")
                try reader.finish()
                let hex: String?
                if let token {
                    guard let parsed = try? DeviceToken(validating: token) else {
                        return error(400, "body.token: expected a device token (hex, 64 to 512 digits)")
                    }
                    hex = parsed.hex
                } else {
                    hex = nil
                }
                return ok(["released": state.releaseHeld(token: hex)])
            case ("POST", "/admin/tokens"):
                let registration = try APNsSimulator.TokenRegistration(jsonObject: .object(try body(request)), path: "body")
                try state.register(registration)
                return ok(["registered": registration.token.lowercased()])
            case ("POST", "/admin/tokens/unregistered"):
                let invalidation = try APNsSimulator.TokenInvalidation(
                    jsonObject: .object(try body(request)), path: "body", now: state.clock.nowMilliseconds())
                try state.invalidate(invalidation)
                return ok(["token": invalidation.token.lowercased(), "timestamp_ms": invalidation.timestampMilliseconds,
                           "reason": invalidation.reason.rawValue])
            case ("GET", "/admin/connections"):
                return ok(["connections": state.connectionStates().map(describe)])
            case ("POST", "/admin/connections/goaway"):
                var reader = JSONReader(try body(request, allowEmpty: true), path: "body")
                let targets = try select(&reader)
                let reason = try reader.string("reason") ?? "Shutdown"
                let code = UInt32(try reader.int("error_code", range: 0...0xD) ?? 0)
                try reader.finish()
                for connection in targets where connection.goAway(lastStreamID: nil, reason: reason, errorCode: code) {
                    state.recorder.count("goaway")
                }
                return ok(["connections": targets.map { $0.connection.id }])
            case ("POST", "/admin/connections/drop"):
                var reader = JSONReader(try body(request, allowEmpty: true), path: "body")
                let targets = try select(&reader)
                try reader.finish()
                for connection in targets {
                    connection.connection.drop()
                    state.recorder.count("dropped")
                }
                return ok(["connections": targets.map { $0.connection.id }])
            case ("GET", "/admin/clock"):
                var object: [String: Any] = ["now_ms": state.clock.nowMilliseconds(), "manual": state.clock is ManualWallClock]
                if let clock = state.clock as? OffsetWallClock { object["offset_ms"] = clock.offsetMilliseconds }
                return ok(object)
            case ("POST", "/admin/clock"):
                var reader = JSONReader(try body(request), path: "body")
                if let clock = state.clock as? ManualWallClock {
                    if let set = try reader.int64("set_ms") { clock.set(milliseconds: set) }
                    if let advance = try reader.int64("advance_ms") { clock.advance(by: .milliseconds(advance)) }
                } else if let clock = state.clock as? OffsetWallClock {
                    if let offset = try reader.int64("offset_ms") { clock.setOffset(milliseconds: offset) }
                    if let advance = try reader.int64("advance_ms") { clock.advance(milliseconds: advance) }
                } else {
                    return error(409, "the simulator runs on the system clock; start it with PUSH_SIM_CLOCK_OFFSET_MS (0 is fine) to move it")
                }
                try reader.finish()
                return ok(["now_ms": state.clock.nowMilliseconds()])
            default:
                return error(404, "no admin route \(request.method) \(route)")
            }
        } catch {
            return self.error(400, error.message)
        }
    }

    /// Connections chosen by optional `environment` and `connection` keys; all when both are absent.
    private func select(_ reader: inout JSONReader) throws(APNsSimulatorError) -> [ConnectionState] {
        let environment = try reader.string("environment")
        let id = try reader.int64("connection")
        return state.connectionStates().filter { candidate in
            (environment == nil || candidate.environment.rawValue == environment)
                && (id == nil || candidate.connection.id == UInt64(id!))
        }
    }

    private func describe(_ connection: ConnectionState) -> [String: Any] {
        let fields = connection.fields.withLock { ($0.streams, $0.trusted, $0.limit, $0.boundKeyID, $0.verified?.issuer) }
        var object: [String: Any] = [
            "environment": connection.environment.rawValue, "connection": connection.connection.id,
            "remote": connection.connection.remoteAddress,
            "auth": connection.certificate == nil ? "token" : "certificate",
            "streams": fields.0, "trusted": fields.1, "max_concurrent_streams": fields.1 ? Int(fields.2) : 1,
        ]
        if let keyID = fields.3 { object["key_id"] = keyID }
        if let team = fields.4 { object["team_id"] = team }
        if let certificate = connection.certificate {
            object["certificate_subject"] = certificate.subject
            object["certificate_topics"] = certificate.topics
        }
        return object
    }

    private func body(_ request: HTTP2ServerRequest, allowEmpty: Bool = false) throws(APNsSimulatorError) -> JSONObject {
        if request.body.isEmpty {
            if allowEmpty { return JSONObject() }
            throw APNsSimulatorError(.invalidConfiguration, "the request needs a JSON object body")
        }
        guard case .object(let object)? = try? JSONValue(parsing: request.body) else {
            throw APNsSimulatorError(.invalidConfiguration, "the body is not a JSON object")
        }
        return object
    }

    private func ok(_ object: [String: Any]) -> HTTP2ServerResponse {
        HTTP2ServerResponse(status: 200, headers: [HTTP2Header("content-type", "application/json")], body: encode(object))
    }

    private func error(_ status: Int, _ message: String) -> HTTP2ServerResponse {
        HTTP2ServerResponse(status: status, headers: [HTTP2Header("content-type", "application/json")], body: encode(["error": message]))
    }

    private func encode(_ object: Any) -> [UInt8] {
        (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])).map { Array($0) } ?? Array("{}".utf8)
    }
}
