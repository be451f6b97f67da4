/// How a pool of connections authenticates to APNs (docs/apns-protocol.md §4 and §5).
///
/// One connection serves one team (token auth) or one certificate: the client keeps a pool per
/// (credentials, environment), so two `APNsCredentials` values that wrap the same object share
/// their pools.
public enum APNsCredentials: Sendable {
    /// Token-based authentication: every request carries `authorization: bearer <JWT>` from this
    /// cache, which holds the one JWT of its (team, key) pair for all connections.
    case token(APNsProviderTokenCache)
    /// Certificate-based authentication: the certificate and its key are the TLS client certificate
    /// (mutual TLS); requests carry no `authorization` header.
    case certificate(APNsCertificateCredentials)

    /// Identifies the wrapped object: pools are keyed by it.
    var identity: ObjectIdentifier {
        switch self {
        case .token(let cache): ObjectIdentifier(cache)
        case .certificate(let certificate): ObjectIdentifier(certificate)
        }
    }

    /// `token(TEAMID/KEYID)` or `certificate(<subject>)`, for logs; never a secret.
    var label: String {
        switch self {
        case .token(let cache): "token(\(cache.teamID)/\(cache.keyID))"
        case .certificate(let certificate): "certificate(\(certificate.subjectUserID ?? certificate.subject))"
        }
    }

    /// The Key ID of token credentials, the certificate's label otherwise (the `key_id` metric label).
    var keyID: String {
        switch self {
        case .token(let cache): cache.keyID
        case .certificate: label
        }
    }

    /// The Team ID of token credentials; empty for a certificate.
    var teamID: String { providerTokens?.teamID ?? "" }

    var providerTokens: APNsProviderTokenCache? {
        if case .token(let cache) = self { return cache }
        return nil
    }
}
