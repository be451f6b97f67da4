#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/bn.h>
#include <openssl/bio.h>
#include <openssl/rand.h>
#include <openssl/pkcs12.h>
#include <openssl/provider.h>
#include <openssl/sha.h>
#include <openssl/hmac.h>
#include <openssl/crypto.h>

/* OpenSSL's process-wide set-up without its exit handler (OPENSSL_init_crypto(3),
 * OPENSSL_INIT_NO_ATEXIT): by default OpenSSL frees its global state in an atexit handler, and a
 * thread still inside libcrypto when the process exits (a connection's TLS, a JWT being signed)
 * then crashes on freed memory. Only the first full initialization of a process decides, so every
 * module calls this before its first other OpenSSL call; later calls cost a few atomic loads. */
static inline int shim_openssl_prepare(void) {
    return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

/* SHA-1 and SHA-256 of one message on a context on the stack (SHA1_Init(3), SHA256_Init(3)):
 * EVP_Digest allocates and frees a digest context and a provider context on every call, which costs
 * several times the hashing of a message of a hundred bytes (a UUID version 5 per notification).
 * These functions are deprecated since OpenSSL 3.0 in favour of EVP, and present throughout 3.x;
 * the deprecation is silenced here only. `out` holds 20 (SHA-1) or 32 (SHA-256) bytes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static inline int shim_sha1(const void *data, size_t length, unsigned char *out) {
    SHA_CTX context;
    if (SHA1_Init(&context) != 1 || SHA1_Update(&context, data, length) != 1) return 0;
    return SHA1_Final(out, &context);
}
static inline int shim_sha256(const void *data, size_t length, unsigned char *out) {
    SHA256_CTX context;
    if (SHA256_Init(&context) != 1 || SHA256_Update(&context, data, length) != 1) return 0;
    return SHA256_Final(out, &context);
}
#pragma GCC diagnostic pop

/* OpenSSL macros Swift cannot call: static inline wrappers. */
static inline long shim_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}
static inline int shim_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}
static inline long shim_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}
static inline long shim_SSL_set_mode(SSL *ssl, long mode) {
    return SSL_set_mode(ssl, mode);
}
static inline long shim_SSL_CTX_set_options(SSL_CTX *ctx, long options) {
    return (long)SSL_CTX_set_options(ctx, (uint64_t)options);
}
static inline int shim_BIO_get_mem_data(BIO *bio, char **pp) {
    return (int)BIO_get_mem_data(bio, pp);
}
static inline const int shim_TLS1_2_VERSION(void) { return TLS1_2_VERSION; }
static inline const int shim_TLS1_3_VERSION(void) { return TLS1_3_VERSION; }
static inline const long shim_SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER(void) { return SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER; }
static inline const long shim_SSL_MODE_ENABLE_PARTIAL_WRITE(void) { return SSL_MODE_ENABLE_PARTIAL_WRITE; }
static inline void shim_OPENSSL_free(void *p) { OPENSSL_free(p); }

/* APNs module: macros used by Sources/APNs/OpenSSL (certificate subject printing). */
static inline unsigned long shim_XN_FLAG_RFC2253(void) { return XN_FLAG_RFC2253; }
static inline int shim_EVP_PKEY_EC(void) { return EVP_PKEY_EC; }
static inline int shim_NID_userId(void) { return NID_userId; }
/* Added for HTTP2 (server TLS, peer certificates). */
static inline long shim_SSL_CTX_set_read_ahead(SSL_CTX *ctx, int yes) { return SSL_CTX_set_read_ahead(ctx, yes); }
static inline long shim_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_session_cache_mode(ctx, mode); }
static inline const long shim_SSL_OP_NO_COMPRESSION(void) { return (long)SSL_OP_NO_COMPRESSION; }
static inline const long shim_SSL_OP_NO_RENEGOTIATION(void) { return (long)SSL_OP_NO_RENEGOTIATION; }
static inline const long shim_SSL_OP_CIPHER_SERVER_PREFERENCE(void) { return (long)SSL_OP_CIPHER_SERVER_PREFERENCE; }
static inline const int shim_SSL_TLSEXT_ERR_OK(void) { return SSL_TLSEXT_ERR_OK; }
static inline const int shim_SSL_TLSEXT_ERR_ALERT_FATAL(void) { return SSL_TLSEXT_ERR_ALERT_FATAL; }
static inline const int shim_SSL_TLSEXT_ERR_NOACK(void) { return SSL_TLSEXT_ERR_NOACK; }
#endif
