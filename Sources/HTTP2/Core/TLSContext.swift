import Foundation
internal import COpenSSL

/// Owns one `SSL_CTX`. An `SSL_CTX` may be shared by many connections on many threads once
/// configured (OpenSSL documents SSL_CTX as thread-safe for creating SSL objects), hence `Sendable`.
final class TLSContext: @unchecked Sendable {
    let ctx: OpaquePointer

    private init(ctx: OpaquePointer) { self.ctx = ctx }
    deinit { SSL_CTX_free(ctx) }

    /// A client context: TLS 1.2+, ALPN h2, verification against `options.caFile`, optional mTLS.
    static func client(_ options: HTTP2ClientTLS) throws(HTTP2Error) -> TLSContext {
        _ = shim_openssl_prepare()  // no exit handler (COpenSSL's shim.h)
        ERR_clear_error()
        guard let ctx = SSL_CTX_new(TLS_client_method()) else {
            throw HTTP2Error(.internalError, "SSL_CTX_new failed: \(openSSLErrors())")
        }
        let context = TLSContext(ctx: ctx)
        try context.applyCommon()
        if options.verifyPeer {
            if let caFile = options.caFile {
                guard SSL_CTX_load_verify_locations(ctx, caFile, nil) == 1 else {
                    throw HTTP2Error(.invalidConfiguration, "cannot load CA file \(caFile): \(openSSLErrors())")
                }
            } else {
                SSL_CTX_set_default_verify_paths(ctx)
            }
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        } else {
            SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nil)
        }
        switch options.clientCertificate {
        case nil:
            break
        case .pemFiles(let chain, let key):
            guard SSL_CTX_use_certificate_chain_file(ctx, chain) == 1 else {
                throw HTTP2Error(.invalidConfiguration, "cannot load client certificate \(chain): \(openSSLErrors())")
            }
            guard SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1 else {
                throw HTTP2Error(.invalidConfiguration, "cannot load client key \(key): \(openSSLErrors())")
            }
        case .pem(let chain, let key):
            try context.usePEM(chain: chain, key: key)
        }
        if options.clientCertificate != nil, SSL_CTX_check_private_key(ctx) != 1 {
            throw HTTP2Error(.invalidConfiguration, "client key does not match certificate: \(openSSLErrors())")
        }
        var alpn: [UInt8] = [2, 0x68, 0x32]  // "h2"
        guard SSL_CTX_set_alpn_protos(ctx, &alpn, 3) == 0 else {  // 0 is success here
            throw HTTP2Error(.internalError, "SSL_CTX_set_alpn_protos failed")
        }
        return context
    }

    /// A server context: TLS 1.2+, ALPN selects h2, optional client-certificate verification.
    static func server(_ options: HTTP2ServerTLS) throws(HTTP2Error) -> TLSContext {
        _ = shim_openssl_prepare()  // no exit handler (COpenSSL's shim.h)
        ERR_clear_error()
        guard let ctx = SSL_CTX_new(TLS_server_method()) else {
            throw HTTP2Error(.internalError, "SSL_CTX_new failed: \(openSSLErrors())")
        }
        let context = TLSContext(ctx: ctx)
        try context.applyCommon()
        _ = shim_SSL_CTX_set_options(ctx, shim_SSL_OP_CIPHER_SERVER_PREFERENCE())
        guard SSL_CTX_use_certificate_chain_file(ctx, options.certificateChainFile) == 1 else {
            throw HTTP2Error(.invalidConfiguration, "cannot load certificate \(options.certificateChainFile): \(openSSLErrors())")
        }
        guard SSL_CTX_use_PrivateKey_file(ctx, options.privateKeyFile, SSL_FILETYPE_PEM) == 1 else {
            throw HTTP2Error(.invalidConfiguration, "cannot load key \(options.privateKeyFile): \(openSSLErrors())")
        }
        guard SSL_CTX_check_private_key(ctx) == 1 else {
            throw HTTP2Error(.invalidConfiguration, "server key does not match certificate: \(openSSLErrors())")
        }
        if let caFile = options.clientCAFile {
            guard SSL_CTX_load_verify_locations(ctx, caFile, nil) == 1 else {
                throw HTTP2Error(.invalidConfiguration, "cannot load client CA file \(caFile): \(openSSLErrors())")
            }
            if let names = SSL_load_client_CA_file(caFile) {
                SSL_CTX_set_client_CA_list(ctx, names)
            }
            var mode = SSL_VERIFY_PEER
            if options.requireClientCertificate { mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT }
            SSL_CTX_set_verify(ctx, mode, nil)
            var sessionContext: [UInt8] = Array("push-http2".utf8)
            SSL_CTX_set_session_id_context(ctx, &sessionContext, UInt32(sessionContext.count))
        }
        SSL_CTX_set_alpn_select_cb(ctx, alpnSelectH2, nil)
        return context
    }

    private func applyCommon() throws(HTTP2Error) {
        guard shim_SSL_CTX_set_min_proto_version(ctx, shim_TLS1_2_VERSION()) == 1 else {
            throw HTTP2Error(.internalError, "cannot require TLS 1.2")
        }
        _ = shim_SSL_CTX_set_mode(ctx, shim_SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER() | shim_SSL_MODE_ENABLE_PARTIAL_WRITE())
        _ = shim_SSL_CTX_set_options(ctx, shim_SSL_OP_NO_COMPRESSION() | shim_SSL_OP_NO_RENEGOTIATION())
    }

    private func usePEM(chain: String, key: String) throws(HTTP2Error) {
        let chainBIO = memoryBIO(chain)
        defer { BIO_free(chainBIO) }
        guard let leaf = PEM_read_bio_X509(chainBIO, nil, nil, nil) else {
            throw HTTP2Error(.invalidConfiguration, "cannot parse client certificate PEM: \(openSSLErrors())")
        }
        defer { X509_free(leaf) }
        guard SSL_CTX_use_certificate(ctx, leaf) == 1 else {
            throw HTTP2Error(.invalidConfiguration, "cannot use client certificate: \(openSSLErrors())")
        }
        while let extra = PEM_read_bio_X509(chainBIO, nil, nil, nil) {
            // SSL_CTX_add1_chain_cert is a macro; SSL_CTX_ctrl is its expansion (SSL_CTRL_CHAIN_CERT = 89, add1 = 1).
            if SSL_CTX_ctrl(ctx, 89, 1, UnsafeMutableRawPointer(extra)) != 1 {
                X509_free(extra)
                throw HTTP2Error(.invalidConfiguration, "cannot add chain certificate: \(openSSLErrors())")
            }
            X509_free(extra)
        }
        ERR_clear_error()  // the loop above ends on a "no start line" error
        let keyBIO = memoryBIO(key)
        defer { BIO_free(keyBIO) }
        guard let pkey = PEM_read_bio_PrivateKey(keyBIO, nil, nil, nil) else {
            throw HTTP2Error(.invalidConfiguration, "cannot parse client key PEM: \(openSSLErrors())")
        }
        defer { EVP_PKEY_free(pkey) }
        guard SSL_CTX_use_PrivateKey(ctx, pkey) == 1 else {
            throw HTTP2Error(.invalidConfiguration, "cannot use client key: \(openSSLErrors())")
        }
    }

    private func memoryBIO(_ text: String) -> OpaquePointer? {
        let bytes = Array(text.utf8)
        let bio = BIO_new(BIO_s_mem())
        _ = bytes.withUnsafeBytes { BIO_write(bio, $0.baseAddress, Int32($0.count)) }
        return bio
    }
}

/// ALPN selection on the server: picks `h2` when the client offers it; otherwise no ALPN (the
/// connection still speaks HTTP/2, for clients with prior knowledge).
private func alpnSelectH2(
    _ ssl: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, _ outlen: UnsafeMutablePointer<UInt8>?,
    _ input: UnsafePointer<UInt8>?, _ inlen: UInt32, _ arg: UnsafeMutableRawPointer?
) -> Int32 {
    guard let input, let out, let outlen else { return shim_SSL_TLSEXT_ERR_NOACK() }
    var i = 0
    let count = Int(inlen)
    while i < count {
        let length = Int(input[i])
        if length == 2, i + 2 < count, input[i + 1] == 0x68, input[i + 2] == 0x32 {
            out.pointee = input + i + 1
            outlen.pointee = 2
            return shim_SSL_TLSEXT_ERR_OK()
        }
        i += 1 + length
    }
    return shim_SSL_TLSEXT_ERR_NOACK()
}

/// Drains this thread's OpenSSL error queue into one line.
func openSSLErrors() -> String {
    var parts: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        parts.append(cString(buffer))
    }
    return parts.isEmpty ? "no OpenSSL error" : parts.joined(separator: "; ")
}
