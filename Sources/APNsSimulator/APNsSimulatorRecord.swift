import Foundation

/// One request an APNs simulator listener received, and how it answered.
public struct APNsSimulatorRecord: Sendable {
    /// `sandbox` or `production`: the listener that received it.
    public var environment: String
    /// The HTTP/2 connection's id (unique per simulator process).
    public var connectionID: UInt64
    /// When it arrived, ms since the UNIX epoch.
    public var receivedAtMilliseconds: Int64
    /// `:method`.
    public var method: String
    /// `:path`.
    public var path: String
    /// Every regular header in arrival order, repeats included.
    public var headers: [(name: String, value: String)]
    /// The request body, exactly as received.
    public var body: [UInt8]
    /// The status the simulator answered with.
    public var status: Int
    /// Apple's reason string when the answer was an error.
    public var reason: String?
    /// The decoded JWT header and claims (JSON text), when a provider token was sent.
    public var jwtHeaderJSON: String?
    public var jwtClaimsJSON: String?
    /// The `apns-id` answered.
    public var apnsID: String?

    /// The record as a JSON object for the admin API.
    func jsonObject() -> [String: Any] {
        var object: [String: Any] = [
            "environment": environment,
            "connection": connectionID,
            "received_at_ms": receivedAtMilliseconds,
            "method": method,
            "path": path,
            "headers": headers.map { [$0.name, $0.value] },
            "body": String(decoding: body, as: UTF8.self),
            "body_bytes": body.count,
            "status": status,
        ]
        if let reason { object["reason"] = reason }
        if let apnsID { object["apns_id"] = apnsID }
        if let header = jwtHeaderJSON, let claims = jwtClaimsJSON,
            let headerObject = try? JSONSerialization.jsonObject(with: Data(header.utf8)),
            let claimsObject = try? JSONSerialization.jsonObject(with: Data(claims.utf8))
        {
            object["jwt"] = ["header": headerObject, "claims": claimsObject]
        }
        return object
    }
}
