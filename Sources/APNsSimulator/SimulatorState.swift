import APNs
import Foundation
import HTTP2
import ServiceCore
import Synchronization

/// The simulator's shared state: trusted keys, received requests and counters. Handlers run on the
/// HTTP/2 servers' event-loop threads, so every mutable field sits behind one `Mutex`.
final class SimulatorState: Sendable {
    private struct Recorded {
        var records: [APNsSimulatorRecord] = []
        var countsByStatusAndReason: [String: Int] = [:]
    }

    private let verifier: APNsJWTVerifier
    private let teamsByKeyID: [String: String]
    private let clock: any WallClock
    private let recordLimit: Int
    private let recorded = Mutex(Recorded())

    init(verifier: APNsJWTVerifier, teamsByKeyID: [String: String], clock: any WallClock, recordLimit: Int) {
        self.verifier = verifier
        self.teamsByKeyID = teamsByKeyID
        self.clock = clock
        self.recordLimit = recordLimit
    }

    /// Answers one device-push request as APNs would.
    func handle(_ request: HTTP2ServerRequest, environment: APNsEnvironment) -> HTTP2ServerResponse {
        var record = APNsSimulatorRecord(
            environment: environment.rawValue, connectionID: request.connection.id,
            receivedAtMilliseconds: clock.nowMilliseconds(), method: request.method, path: request.path,
            headers: request.headers.map { ($0.name, $0.value) }, body: request.body, status: 200)
        let apnsID = request.headers.first("apns-id") ?? APNsID.random().uuidString
        var responseHeaders = [HTTP2Header("apns-id", apnsID)]
        if environment == .sandbox { responseHeaders.append(HTTP2Header("apns-unique-id", UUID().uuidString.lowercased())) }

        let failure = check(request, environment: environment, record: &record)
        let response: HTTP2ServerResponse
        if let (status, reason) = failure {
            record.status = status
            record.reason = reason.rawValue
            response = HTTP2ServerResponse(
                status: status, headers: [HTTP2Header("apns-id", apnsID), HTTP2Header("content-type", "application/json")],
                body: APNsErrorResponse(reason: reason).body)
        } else {
            response = HTTP2ServerResponse(status: 200, headers: responseHeaders)
        }
        record.apnsID = apnsID
        store(record)
        return response
    }

    /// Apple's checks, in the order Apple applies them; nil when the request is accepted.
    private func check(
        _ request: HTTP2ServerRequest, environment: APNsEnvironment, record: inout APNsSimulatorRecord
    ) -> (Int, APNsReason)? {
        guard request.method == "POST" else { return (405, .methodNotAllowed) }
        let prefix = "/3/device/"
        guard request.path.hasPrefix(prefix) else { return (404, .badPath) }
        let tokenText = String(request.path.dropFirst(prefix.count))
        guard !tokenText.isEmpty else { return (400, .missingDeviceToken) }

        // Provider token (certificate connections come with the full simulator).
        guard let authorization = request.headers.first("authorization"), !authorization.isEmpty else {
            return (403, .missingProviderToken)
        }
        guard authorization.hasPrefix("bearer ") else { return (403, .invalidProviderToken) }
        let jwt: APNsVerifiedJWT
        do {
            jwt = try verifier.verify(String(authorization.dropFirst("bearer ".count)))
        } catch {
            return (403, .invalidProviderToken)
        }
        record.jwtHeaderJSON = jwt.headerJSON
        record.jwtClaimsJSON = jwt.claimsJSON
        guard teamsByKeyID[jwt.keyID] == jwt.issuer else { return (403, .invalidProviderToken) }
        if jwt.age(atSeconds: clock.nowSeconds()) > 3600 { return (403, .expiredProviderToken) }

        guard let topic = request.headers.first("apns-topic"), !topic.isEmpty else { return (400, .missingTopic) }
        _ = topic
        guard (try? DeviceToken(validating: tokenText))?.hex == tokenText else { return (400, .badDeviceToken) }
        if request.body.isEmpty { return (400, .payloadEmpty) }
        let limit = request.headers.first("apns-push-type") == "voip" ? 5120 : 4096
        if request.body.count > limit { return (413, .payloadTooLarge) }
        return nil
    }

    private func store(_ record: APNsSimulatorRecord) {
        recorded.withLock { recorded in
            if recorded.records.count >= recordLimit { recorded.records.removeFirst(recorded.records.count / 10 + 1) }
            recorded.records.append(record)
            recorded.countsByStatusAndReason["\(record.status) \(record.reason ?? "")".trimmingCharacters(in: .whitespaces), default: 0] += 1
        }
    }

    func records() -> [APNsSimulatorRecord] { recorded.withLock { $0.records } }

    func reset() { recorded.withLock { $0 = Recorded() } }

    /// The admin API: `GET /admin/requests`, `GET /admin/counters`, `POST /admin/reset`.
    func handleAdmin(_ request: HTTP2ServerRequest) -> HTTP2ServerResponse {
        let json = [HTTP2Header("content-type", "application/json")]
        switch (request.method, request.path) {
        case ("GET", "/admin/requests"):
            let records = self.records().map { $0.jsonObject() }
            return HTTP2ServerResponse(status: 200, headers: json, body: Self.encode(["requests": records]))
        case ("GET", "/admin/counters"):
            let counts = recorded.withLock { $0.countsByStatusAndReason }
            return HTTP2ServerResponse(status: 200, headers: json, body: Self.encode(["counters": counts]))
        case ("POST", "/admin/reset"):
            reset()
            return HTTP2ServerResponse(status: 200, headers: json, body: Self.encode(["reset": true]))
        default:
            return HTTP2ServerResponse(status: 404, headers: json, body: Self.encode(["error": "no admin route \(request.method) \(request.path)"]))
        }
    }

    private static func encode(_ object: Any) -> [UInt8] {
        (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])).map { Array($0) } ?? Array("{}".utf8)
    }
}
