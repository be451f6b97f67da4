/// TLS options of a client connection (TLS 1.2 or newer, ALPN `h2`).
public struct HTTP2ClientTLS: Sendable {
    /// A client certificate for mutual TLS.
    public enum ClientCertificate: Sendable {
        /// PEM files: the certificate chain (leaf first) and its private key (PKCS#8 or traditional).
        case pemFiles(certificateChain: String, privateKey: String)
        /// PEM text held in memory: certificate chain and private key.
        case pem(certificateChain: String, privateKey: String)
    }

    /// PEM file of CA certificates that may sign the server's certificate; `nil` means the system's
    /// default trust store.
    public var caFile: String?
    /// Whether to verify the server certificate (chain and host name / IP). Default `true`.
    public var verifyPeer: Bool = true
    /// Name sent as SNI and checked against the certificate; `nil` means the connect host. SNI is not
    /// sent for IP addresses, which are checked against the certificate's IP subjectAltNames.
    public var serverName: String?
    /// Optional client certificate (mTLS).
    public var clientCertificate: ClientCertificate?

    /// Creates TLS options.
    public init(caFile: String? = nil, verifyPeer: Bool = true, serverName: String? = nil, clientCertificate: ClientCertificate? = nil) {
        self.caFile = caFile
        self.verifyPeer = verifyPeer
        self.serverName = serverName
        self.clientCertificate = clientCertificate
    }
}

/// TLS options of a server (TLS 1.2 or newer, ALPN `h2`).
public struct HTTP2ServerTLS: Sendable {
    /// PEM file with the server certificate chain (leaf first).
    public var certificateChainFile: String
    /// PEM file with the server's private key.
    public var privateKeyFile: String
    /// PEM file of CAs that client certificates must chain to. When set, the server requests a client
    /// certificate during the handshake and verifies any certificate sent.
    public var clientCAFile: String?
    /// With `clientCAFile`: whether a client without a certificate fails the handshake. Default `false`
    /// (handlers then see `peerCertificate == nil` and decide, as APNs answers 403 instead).
    public var requireClientCertificate: Bool = false

    /// Creates TLS options.
    public init(certificateChainFile: String, privateKeyFile: String, clientCAFile: String? = nil, requireClientCertificate: Bool = false) {
        self.certificateChainFile = certificateChainFile
        self.privateKeyFile = privateKeyFile
        self.clientCAFile = clientCAFile
        self.requireClientCertificate = requireClientCertificate
    }
}

/// The verified certificate a TLS peer presented.
public struct HTTP2PeerCertificate: Sendable, Hashable {
    /// One attribute of a distinguished name, such as `UID=com.example.app`.
    public struct NameComponent: Sendable, Hashable {
        /// OpenSSL's short name of the attribute (`CN`, `O`, `OU`, `C`, `UID`, …) or its dotted OID.
        public var name: String
        /// The attribute's value as UTF-8.
        public var value: String
    }
    /// The subject in RFC 2253 form, most specific first (`UID=…,CN=…,OU=…,O=…,C=…`).
    public var subject: String
    /// The subject's attributes in certificate order.
    public var subjectComponents: [NameComponent]
    /// The issuer in RFC 2253 form.
    public var issuer: String
    /// The DER encoding of the certificate.
    public var der: [UInt8]

    /// The value of the first subject attribute named `name` (for example `"CN"` or `"UID"`).
    public func subjectComponent(_ name: String) -> String? {
        subjectComponents.first { $0.name == name }?.value
    }
}
