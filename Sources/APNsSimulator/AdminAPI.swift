import APNs
import Foundation
import HTTP2
import ProtobufCodec
import PushDomain
import ServiceCore

/// The admin API's routes (documented on `APNsSimulator`). Runs on the admin listener's single
/// event-loop thread. Answers are written with the project's JSON writer, keys in order.
struct AdminAPI: Sendable {
    let state: SimulatorState

    func handle(_ request: HTTP2ServerRequest) -> HTTP2ServerResponse {
        let pathAndQuery = request.path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let route = pathAndQuery.first.map(String.init) ?? request.path
        do {
            switch (request.method, route) {
            case ("GET", "/admin/requests"):
                let query = try RecordQuery(query: pathAndQuery.count == 2 ? pathAndQuery[1] : nil)
                return ok(["requests": .array(query.apply(to: state.recorder.records()).map(\.jsonValue))])
            case ("GET", "/admin/counters"):
                let (counters, total) = state.recorder.counters()
                return ok(["counters": .sortedObject(counters.mapValues { .integer($0) }), "total": .integer(total)])
            case ("POST", "/admin/reset"):
                state.reset()
                return ok(["reset": .bool(true)])
            case ("GET", "/admin/faults"):
                return ok(state.faults.jsonValue)
            case ("PUT", "/admin/faults"):
                let faults = try APNsSimulatorFaults(jsonObject: try body(request))
                state.setFaults(faults)
                return ok(faults.jsonValue)
            case ("GET", "/admin/held"):
                let held = state.held.withLock { $0 }.map { answer -> JSONValue in
                    .sortedObject([
                        "token": .string(answer.token), "environment": .string(answer.environment.rawValue),
                        "connection": .integer(answer.connectionID), "stream": .integer(answer.streamID), "status": .integer(answer.status),
                    ])
                }
                return ok(["held": .array(held)])
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
                return ok(["released": .integer(state.releaseHeld(token: hex))])
            case ("POST", "/admin/tokens"):
                let registration = try APNsSimulator.TokenRegistration(jsonObject: .object(try body(request)), path: "body")
                try state.register(registration)
                return ok(["registered": .string(registration.token.lowercased())])
            case ("POST", "/admin/tokens/unregistered"):
                let invalidation = try APNsSimulator.TokenInvalidation(
                    jsonObject: .object(try body(request)), path: "body", now: state.clock.nowMilliseconds())
                try state.invalidate(invalidation)
                return ok(["token": .string(invalidation.token.lowercased()), "timestamp_ms": .integer(invalidation.timestampMilliseconds),
                           "reason": .string(invalidation.reason.rawValue)])
            case ("PUT", "/admin/keys/topics"):
                var reader = JSONReader(try body(request), path: "body")
                guard let keyID = try reader.string("key_id") else { return error(400, "body.key_id: required") }
                let topics = try reader.strings("topics")
                try reader.finish()
                try state.setTopics(topics, forKey: keyID)
                return ok(["key_id": .string(keyID), "topics": topics.map(JSONValue.strings) ?? .null])
            case ("GET", "/admin/channels"):
                return ok(["channels": state.channelsJSON()])
            case ("PUT", "/admin/channels/subscribers"):
                var reader = JSONReader(try body(request), path: "body")
                guard let channelID = try reader.string("channel_id") else { return error(400, "body.channel_id: required") }
                guard let count = try reader.int("subscribers", range: 0...Int.max) else { return error(400, "body.subscribers: required") }
                try reader.finish()
                try state.setSubscribers(count, channelID: channelID)
                return ok(["channel_id": .string(channelID), "subscribers": .integer(count)])
            case ("PUT", "/admin/broadcast"):
                var reader = JSONReader(try body(request), path: "body")
                guard let bundleID = try reader.string("bundle_id") else { return error(400, "body.bundle_id: required") }
                guard let enabled = try reader.bool("enabled") else { return error(400, "body.enabled: required") }
                try reader.finish()
                state.setBroadcastEnabled(enabled, bundleID: bundleID)
                return ok(["bundle_id": .string(bundleID), "enabled": .bool(enabled)])
            case ("GET", "/admin/connections"):
                return ok(["connections": .array(state.connectionStates().map(describe))])
            case ("POST", "/admin/connections/goaway"):
                var reader = JSONReader(try body(request, allowEmpty: true), path: "body")
                let targets = try select(&reader)
                let reason = try reader.string("reason") ?? "Shutdown"
                let code = UInt32(try reader.int("error_code", range: 0...0xD) ?? 0)
                try reader.finish()
                for connection in targets where connection.goAway(lastStreamID: nil, reason: reason, errorCode: code) {
                    state.recorder.count("goaway")
                }
                return ok(["connections": .array(targets.map { .integer($0.connection.id) })])
            case ("POST", "/admin/connections/drop"):
                var reader = JSONReader(try body(request, allowEmpty: true), path: "body")
                let targets = try select(&reader)
                try reader.finish()
                for connection in targets {
                    connection.connection.drop()
                    state.recorder.count("dropped")
                }
                return ok(["connections": .array(targets.map { .integer($0.connection.id) })])
            case ("GET", "/admin/clock"):
                var object: [String: JSONValue] = ["now_ms": .integer(state.clock.nowMilliseconds()), "manual": .bool(state.clock is ManualWallClock)]
                if let clock = state.clock as? OffsetWallClock { object["offset_ms"] = .integer(clock.offsetMilliseconds) }
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
                return ok(["now_ms": .integer(state.clock.nowMilliseconds())])
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

    private func describe(_ connection: ConnectionState) -> JSONValue {
        let fields = connection.fields.withLock { ($0.streams, $0.trusted, $0.limit, $0.boundKeyID, $0.verified?.issuer, $0.boundTopics) }
        var object: [String: JSONValue] = [
            "environment": .string(connection.environment.rawValue), "connection": .integer(connection.connection.id),
            "remote": .string(connection.connection.remoteAddress),
            "auth": .string(connection.certificate == nil ? "token" : "certificate"),
            "streams": .integer(fields.0), "trusted": .bool(fields.1), "max_concurrent_streams": .integer(fields.1 ? Int(fields.2) : 1),
        ]
        if let keyID = fields.3 { object["key_id"] = .string(keyID) }
        if let team = fields.4 { object["team_id"] = .string(team) }
        if let topics = fields.5 { object["key_topics"] = .strings(topics.sorted()) }
        if let certificate = connection.certificate {
            object["certificate_subject"] = .string(certificate.subject)
            object["certificate_topics"] = .strings(certificate.topics)
        }
        return .sortedObject(object)
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

    private func ok(_ members: [String: JSONValue]) -> HTTP2ServerResponse { ok(.sortedObject(members)) }

    private func ok(_ value: JSONValue) -> HTTP2ServerResponse {
        HTTP2ServerResponse(status: 200, headers: [HTTP2Header("content-type", "application/json")], body: value.serializedBytes)
    }

    private func error(_ status: Int, _ message: String) -> HTTP2ServerResponse {
        HTTP2ServerResponse(
            status: status, headers: [HTTP2Header("content-type", "application/json")],
            body: JSONValue.sortedObject(["error": .string(message)]).serializedBytes)
    }
}
