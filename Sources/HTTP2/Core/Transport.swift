import Foundation
internal import COpenSSL

/// A non-blocking socket with an optional TLS session on it. Owns the fd and the `SSL` object.
/// Used only on its connection's event-loop thread (the OpenSSL error queue is per thread, and every
/// `SSL_*` call below is preceded by `ERR_clear_error()` and followed by `SSL_get_error` with no
/// suspension in between).
final class Transport {
    enum IOResult {
        case bytes(Int)
        case wouldBlock(wantsWrite: Bool)
        case closed
        case failed(String)
    }

    enum HandshakeResult {
        case done
        case wantRead
        case wantWrite
        case failed(HTTP2Error)
    }

    let fd: Int32
    private let ssl: OpaquePointer?
    private(set) var isClosed = false
    /// Kept so that the `SSL_CTX` outlives the `SSL`.
    private let context: TLSContext?

    init(fd: Int32, context: TLSContext?, isServer: Bool, serverName: String? = nil, verifyHost: String? = nil) throws(HTTP2Error) {
        self.fd = fd
        self.context = context
        guard let context else {
            ssl = nil
            return
        }
        ERR_clear_error()
        guard let ssl = SSL_new(context.ctx) else {
            close(fd)
            throw HTTP2Error(.internalError, "SSL_new failed: \(openSSLErrors())")
        }
        self.ssl = ssl
        SSL_set_fd(ssl, fd)
        if isServer {
            SSL_set_accept_state(ssl)
        } else {
            SSL_set_connect_state(ssl)
            if let serverName, !isIPAddress(serverName) {
                _ = shim_SSL_set_tlsext_host_name(ssl, serverName)
            }
            if let verifyHost {
                if isIPAddress(verifyHost) {
                    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), verifyHost)
                } else {
                    SSL_set1_host(ssl, verifyHost)
                }
            }
        }
    }

    deinit {
        if let ssl { SSL_free(ssl) }
        if !isClosed { close(fd) }
    }

    var isTLS: Bool { ssl != nil }

    /// Closes the socket now (no TLS close_notify: an abrupt drop).
    func closeNow() {
        guard !isClosed else { return }
        isClosed = true
        close(fd)
    }

    /// Sends TLS close_notify (best effort) and ends the sending side (FIN) while the socket stays open
    /// for reading: the first half of a lingering close (`SessionCore.closeConnection`). False when
    /// the socket is closed already or `shutdown(2)` failed (the caller then closes at once).
    func shutdownSending() -> Bool {
        guard !isClosed else { return false }
        if let ssl {
            ERR_clear_error()
            _ = SSL_shutdown(ssl)
        }
        return shutdown(fd, Int32(SHUT_WR)) == 0
    }

    /// Reads and drops whatever the peer sent, as raw bytes (TLS is over once close_notify went out).
    /// Returns true when the peer closed its side or the socket failed, false when nothing more is
    /// readable for now.
    func discardIncoming(into buffer: UnsafeMutableRawBufferPointer) -> Bool {
        while true {
            let count = recv(fd, buffer.baseAddress, buffer.count, 0)
            if count > 0 { continue }
            if count == 0 { return true }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return false
            default: return true
            }
        }
    }

    func handshake() -> HandshakeResult {
        guard let ssl else { return .done }
        ERR_clear_error()
        let rc = SSL_do_handshake(ssl)
        if rc == 1 { return .done }
        let error = SSL_get_error(ssl, rc)
        switch error {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        default:
            let verify = SSL_get_verify_result(ssl)
            let details = openSSLErrors()
            if verify != X509_V_OK {
                let reason = String(cString: X509_verify_cert_error_string(verify))
                return .failed(HTTP2Error(.certificateVerificationFailed, "certificate verification failed: \(reason) (\(details))"))
            }
            let sysErr = error == SSL_ERROR_SYSCALL ? " errno=\(errnoString())" : ""
            return .failed(HTTP2Error(.tlsHandshakeFailed, "TLS handshake failed (SSL error \(error)\(sysErr)): \(details)"))
        }
    }

    /// The protocol selected through ALPN, if any.
    var alpnProtocol: String? {
        guard let ssl else { return nil }
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// The peer's certificate, when one was presented and verified.
    func peerCertificate() -> HTTP2PeerCertificate? {
        guard let ssl, let cert = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(cert) }
        guard SSL_get_verify_result(ssl) == X509_V_OK else { return nil }
        let subjectName = X509_get_subject_name(cert)
        var components: [HTTP2PeerCertificate.NameComponent] = []
        let count = X509_NAME_entry_count(subjectName)
        for i in 0..<count {
            guard let entry = X509_NAME_get_entry(subjectName, i) else { continue }
            let object = X509_NAME_ENTRY_get_object(entry)
            let nid = OBJ_obj2nid(object)
            var name: String
            if nid != NID_undef, let short = OBJ_nid2sn(nid) {
                name = String(cString: short)
            } else {
                var buffer = [CChar](repeating: 0, count: 128)
                OBJ_obj2txt(&buffer, 128, object, 1)
                name = cString(buffer)
            }
            if name == "userId" { name = "UID" }
            var utf8: UnsafeMutablePointer<UInt8>?
            let length = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(entry))
            var value = ""
            if length >= 0, let utf8 {
                value = String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
                shim_OPENSSL_free(utf8)
            }
            components.append(.init(name: name, value: value))
        }
        var derPointer: UnsafeMutablePointer<UInt8>?
        let derLength = i2d_X509(cert, &derPointer)
        var der: [UInt8] = []
        if derLength > 0, let derPointer {
            der = Array(UnsafeBufferPointer(start: derPointer, count: Int(derLength)))
            shim_OPENSSL_free(derPointer)
        }
        return HTTP2PeerCertificate(
            subject: rfc2253(subjectName), subjectComponents: components,
            issuer: rfc2253(X509_get_issuer_name(cert)), der: der)
    }

    private func rfc2253(_ name: OpaquePointer?) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        X509_NAME_print_ex(bio, name, 0, shim_XN_FLAG_RFC2253())
        var data: UnsafeMutablePointer<CChar>?
        let length = shim_BIO_get_mem_data(bio, &data)
        guard length > 0, let data else { return "" }
        return data.withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
            String(decoding: UnsafeBufferPointer(start: $0, count: Int(length)), as: UTF8.self)
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        if let ssl {
            ERR_clear_error()
            let n = SSL_read(ssl, buffer.baseAddress, Int32(buffer.count))
            if n > 0 { return .bytes(Int(n)) }
            let error = SSL_get_error(ssl, n)
            switch error {
            case SSL_ERROR_WANT_READ: return .wouldBlock(wantsWrite: false)
            case SSL_ERROR_WANT_WRITE: return .wouldBlock(wantsWrite: true)
            case SSL_ERROR_ZERO_RETURN: return .closed
            case SSL_ERROR_SYSCALL:
                let code = errno
                return n == 0 || code == 0 || code == ECONNRESET ? .closed : .failed("SSL_read: \(errnoString(code))")
            default: return .failed("SSL_read: \(openSSLErrors())")
            }
        }
        while true {
            let n = Foundation.read(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .closed }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock(wantsWrite: false) }
            if code == ECONNRESET { return .closed }
            return .failed("read: \(errnoString(code))")
        }
    }

    func write(_ buffer: UnsafeRawBufferPointer) -> IOResult {
        if let ssl {
            ERR_clear_error()
            let n = SSL_write(ssl, buffer.baseAddress, Int32(min(buffer.count, Int(Int32.max))))
            if n > 0 { return .bytes(Int(n)) }
            let error = SSL_get_error(ssl, n)
            switch error {
            case SSL_ERROR_WANT_WRITE: return .wouldBlock(wantsWrite: true)
            case SSL_ERROR_WANT_READ: return .wouldBlock(wantsWrite: false)
            case SSL_ERROR_ZERO_RETURN: return .closed
            case SSL_ERROR_SYSCALL:
                let code = errno
                return code == EPIPE || code == ECONNRESET || code == 0 ? .closed : .failed("SSL_write: \(errnoString(code))")
            default: return .failed("SSL_write: \(openSSLErrors())")
            }
        }
        while true {
            let n = send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return .bytes(n) }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock(wantsWrite: true) }
            if code == EPIPE || code == ECONNRESET { return .closed }
            return .failed("send: \(errnoString(code))")
        }
    }
}

func isIPAddress(_ host: String) -> Bool {
    var v4 = in_addr()
    var v6 = in6_addr()
    return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
}
