import APNs
import Foundation
import HTTP2
import ProtobufCodec
import PushDomain
import Synchronization

/// One request a push listener received, and what the simulator did with it.
public struct APNsSimulatorRecord: Sendable {
    /// The listener that received it.
    public var environment: APNsEnvironment
    /// The HTTP/2 connection's id (unique per listener; with `environment` unique per simulator).
    public var connectionID: UInt64
    /// The stream the request came on.
    public var streamID: Int32
    /// When it arrived by the simulator's clock, ms since the UNIX epoch.
    public var receivedAtMilliseconds: Int64
    /// `:method`.
    public var method: String
    /// `:path`.
    public var path: String
    /// Every regular header in arrival order, repeats included.
    public var headers: [HTTP2Header]
    /// The request body, exactly as received.
    public var body: [UInt8]
    /// The status answered; nil when the request got no answer (a fault).
    public var status: Int?
    /// Apple's reason when the answer was an error.
    public var reason: String?
    /// The 410 `timestamp`, ms since the epoch.
    public var timestampMilliseconds: Int64?
    /// The `apns-id` answered.
    public var apnsID: String?
    /// The fault that shaped the answer: `unanswered`, `hung` (a hung device token), `dropped`, `refused` (above the
    /// last-stream-id of a GOAWAY already sent: not processed, no answer), `injected` (a status
    /// share or the per-token rate limit), `held` (the `hold` fault kept the answer until released), or nil.
    public var fault: String?
    /// How long the answer was held back (latency fault), in ms; 0 when answered at once.
    public var delayMilliseconds: Int64 = 0
    /// The certificate subject of a certificate-auth connection.
    public var certificateSubject: String?

    /// The decoded JWT header and claims of the `authorization` header (decoded, not verified), as
    /// parsed JSON objects (members in their order); nil when there is none or it is not a JWT.
    public var jwt: (header: JSONObject, claims: JSONObject)? {
        guard let authorization = headers.first("authorization") else { return nil }
        let token = authorization.hasPrefix("bearer ") ? authorization.dropFirst(7) : Substring(authorization)
        guard let jwt = try? JSONWebToken(parsing: String(token)),
              case .object(let header)? = try? JSONValue(parsing: Array(jwt.headerJSON.utf8)),
              case .object(let claims)? = try? JSONValue(parsing: Array(jwt.claimsJSON.utf8))
        else { return nil }
        return (header, claims)
    }

    /// The record as the admin API shows it (see `APNsSimulator`'s admin API documentation), keys in order.
    var jsonValue: JSONValue {
        var object: [String: JSONValue] = [
            "environment": .string(environment.rawValue),
            "connection": .integer(connectionID),
            "stream": .integer(streamID),
            "received_at_ms": .integer(receivedAtMilliseconds),
            "method": .string(method),
            "path": .string(path),
            "headers": .array(headers.map { .strings([$0.name, $0.value]) }),
            "body": .string(String(decoding: body, as: UTF8.self)),
            "body_bytes": .integer(body.count),
            "status": status.map { .integer($0) } ?? .null,
            "delay_ms": .integer(delayMilliseconds),
        ]
        if let reason { object["reason"] = .string(reason) }
        if let timestampMilliseconds { object["timestamp"] = .integer(timestampMilliseconds) }
        if let apnsID { object["apns_id"] = .string(apnsID) }
        if let fault { object["fault"] = .string(fault) }
        if let certificateSubject { object["certificate_subject"] = .string(certificateSubject) }
        if let jwt { object["jwt"] = .sortedObject(["header": .object(jwt.header), "claims": .object(jwt.claims)]) }
        return .sortedObject(object)
    }
}

/// The received requests (a ring of at most `limit`) and counters by outcome, behind one `Mutex`
/// held only to swap a reference and bump a counter: records are boxed before locking and the
/// evicted one is freed after unlocking (freeing headers and body inside the lock made it the
/// hottest contended section under h2load).
final class Recorder: Sendable {
    private final class Box: Sendable {
        let record: APNsSimulatorRecord
        init(_ record: APNsSimulatorRecord) { self.record = record }
    }

    private struct State {
        var ring: [Box] = []
        var next = 0
        var accepted = 0
        var counters: [String: Int] = [:]
        var total = 0
    }

    private let limit: Int
    private let state = Mutex(State())

    init(limit: Int) { self.limit = max(1, limit) }

    /// Appends `record` and counts it under `counter` (`"200"`, `"400 BadDeviceToken"`, `"unanswered"`…).
    func append(_ record: APNsSimulatorRecord, counter: String) {
        let box = Box(record)
        let isAccepted = counter == "200"
        let evicted: Box? = state.withLock { state in
            var evicted: Box?
            if state.ring.count < limit {
                state.ring.append(box)
            } else {
                evicted = state.ring[state.next]
                state.ring[state.next] = box
                state.next = (state.next + 1) % limit
            }
            if isAccepted { state.accepted += 1 } else { state.counters[counter, default: 0] += 1 }
            state.total += 1
            return evicted
        }
        withExtendedLifetime(evicted) {}
    }

    /// Counts an event that has no request record (`goaway`, `dropped`).
    func count(_ counter: String, by amount: Int = 1) {
        state.withLock { $0.counters[counter, default: 0] += amount }
    }

    /// The kept records, oldest first.
    func records() -> [APNsSimulatorRecord] {
        let boxes = state.withLock { Array($0.ring[$0.next...] + $0.ring[..<$0.next]) }
        return boxes.map(\.record)
    }

    /// Counters by outcome and the total number of requests.
    func counters() -> (counters: [String: Int], total: Int) {
        state.withLock { state in
            var counters = state.counters
            if state.accepted > 0 { counters["200"] = state.accepted }
            return (counters, state.total)
        }
    }

    func reset() {
        let old = state.withLock { state in
            defer { state = State() }
            return state.ring
        }
        withExtendedLifetime(old) {}
    }
}
