import Postgres
import PushMessages
import ServiceCore

/// What a send request asks for, as a SHA-256 over its `notification` and `target` (deterministic
/// serialization, maps in key order): a redelivered record, or a producer's retry, has the same one; a
/// request id reused for another notification or audience has another (docs/contracts.md "Request
/// ids": `request_id_reused`).
public enum RequestFingerprint {
    /// 32 bytes.
    public static func of(_ request: SendRequest) -> [UInt8] {
        var asked = SendRequest()
        asked.notification = request.notification
        asked.target = request.target
        asked.sendAtMs = request.sendAtMs
        return Digest.sha256(asked.serializedBytes())
    }
}

extension TokenStore {
    /// Records each request's fingerprint unless its request id has one already (table
    /// `request_fingerprints`, deleted with `send_log`'s retention), in one statement.
    /// - Parameter requests: (request id, `RequestFingerprint.of`).
    /// - Returns: per input, the fingerprint recorded earlier, or nil when this call recorded it.
    /// - Throws: `PostgresError`.
    func recordFingerprints(_ requests: [(requestID: String, fingerprint: [UInt8])]) async throws -> [[UInt8]?] {
        guard !requests.isEmpty else { return [] }
        let rows = try await pool.withConnection { connection in
            // The SELECT reads the snapshot before the INSERT: rows it finds were there already.
            try await connection.query("""
                WITH input AS (SELECT * FROM unnest($1::text[], $2::bytea[]) AS i(request_id, fingerprint)),
                     added AS (INSERT INTO request_fingerprints (request_id, fingerprint)
                               SELECT request_id, fingerprint FROM input ON CONFLICT (request_id) DO NOTHING)
                SELECT f.request_id, f.fingerprint
                  FROM request_fingerprints f WHERE f.request_id = ANY($1::text[])
                """,
                [.textArray(requests.map(\.requestID)),
                 .byteaArray(requests.map(\.fingerprint))],
                prepared: true)
        }
        var earlier: [String: [UInt8]] = [:]
        for row in rows {
            guard let id = try row.string("request_id"), let fingerprint = try row.bytes("fingerprint") else { continue }
            earlier[id] = fingerprint
        }
        // A request id listed twice in one call: the first one recorded it, later ones compare with it.
        var seen: [String: [UInt8]] = [:]
        return requests.map { request in
            if let stored = earlier[request.requestID] { return stored }
            if let first = seen[request.requestID] { return first }
            seen[request.requestID] = request.fingerprint
            return nil
        }
    }
}
