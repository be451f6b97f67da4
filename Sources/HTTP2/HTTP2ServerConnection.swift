/// One accepted connection of an `HTTP2Server`: identity, peer certificate, and the controls an
/// APNs-like server needs (GOAWAY, abrupt drop, SETTINGS changes).
///
/// Every control is safe from any thread: it runs on the connection's thread (immediately when called
/// there, for example from inside a handler, otherwise through its queue). Controls on a closed
/// connection do nothing.
public final class HTTP2ServerConnection: Sendable, CustomStringConvertible {
    let core: ServerCore
    /// A process-unique id, increasing from 1 in accept order.
    public let id: UInt64
    /// The client's address as `ip:port` (IPv6 in brackets).
    public let remoteAddress: String
    /// The verified client certificate, when the server requests client certificates and one was sent.
    public let peerCertificate: HTTP2PeerCertificate?
    /// The ALPN protocol negotiated (`h2`), or nil for cleartext or no ALPN.
    public let alpnProtocol: String?

    init(core: ServerCore, id: UInt64, remoteAddress: String, peerCertificate: HTTP2PeerCertificate?, alpnProtocol: String?) {
        self.core = core
        self.id = id
        self.remoteAddress = remoteAddress
        self.peerCertificate = peerCertificate
        self.alpnProtocol = alpnProtocol
    }

    public var description: String { "HTTP2ServerConnection(id: \(id), remote: \(remoteAddress))" }

    private func run(_ body: @escaping @Sendable (ServerCore) -> Void) {
        let core = self.core
        if core.loop.inLoop { body(core) } else { core.loop.execute { body(core) } }
    }

    /// Sends GOAWAY (RFC 9113 §6.8). Streams above `lastStreamID` are closed; the connection closes
    /// once the remaining streams have finished. `lastStreamID` nil means the last stream the server
    /// has processed. `debugData` is opaque bytes (APNs puts a JSON reason there).
    public func sendGoAway(lastStreamID: Int32? = nil, errorCode: HTTP2ErrorCode = .noError, debugData: [UInt8] = []) {
        run { $0.goAway(lastStreamID: lastStreamID, errorCode: errorCode, debugData: debugData) }
    }

    /// Closes the TCP connection at once: no GOAWAY, no TLS close_notify, open streams abandoned.
    public func drop() {
        run { $0.drop() }
    }

    /// Sends a SETTINGS frame with `settings` (RFC 9113 §6.5).
    public func submitSettings(_ settings: [HTTP2Setting]) {
        run { $0.submitSettings(settings) }
    }

    /// Announces a new SETTINGS_MAX_CONCURRENT_STREAMS for this connection. nghttp2 refuses streams
    /// above the new limit once the client acknowledged it.
    public func setMaxConcurrentStreams(_ value: UInt32) {
        submitSettings([HTTP2Setting(.maxConcurrentStreams, value)])
    }
}
