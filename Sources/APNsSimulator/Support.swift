import APNs
import Foundation
import HTTP2
import ServiceCore

/// SplitMix64: a small, fast pseudo-random generator for fault shares, latency samples and
/// generated `apns-id`s. Not for secrets. Each connection owns one (no lock, no syscall per draw).
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    /// Seeded from the system's generator.
    init() {
        var system = SystemRandomNumberGenerator()
        state = system.next()
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform double in [0, 1).
    mutating func unit() -> Double { Double(next() >> 11) * 0x1.0p-53 }

    /// A random (version 4) UUID in lowercase 8-4-4-4-12 form, from this generator (no system call).
    mutating func uuidString() -> String {
        let high = (next() & 0xFFFF_FFFF_FFFF_0FFF | 0x0000_0000_0000_4000).bigEndian  // version 4
        let low = (next() & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000).bigEndian   // RFC 9562 variant
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { bytes in
            withUnsafeBytes(of: high) { bytes.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: 8) }
            withUnsafeBytes(of: low) { (bytes.baseAddress! + 8).copyMemory(from: $0.baseAddress!, byteCount: 8) }
        }
        return UUID(uuid: uuid).lowercasedString
    }
}

enum APNsIDSyntax {
    /// True for a canonical UUID, 8-4-4-4-12 hex digits in any case (docs/apns-protocol.md §2 `apns-id`).
    static func isValid(_ text: String) -> Bool {
        let utf8 = text.utf8
        return utf8.withContiguousStorageIfAvailable(check) ?? Array(utf8).withUnsafeBufferPointer(check)
    }

    private static func check(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard bytes.count == 36 else { return false }
        for (index, byte) in bytes.enumerated() {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                if byte != 0x2D { return false }
            } else {
                let lower = byte | 0x20
                if !((byte >= 0x30 && byte <= 0x39) || (lower >= 0x61 && lower <= 0x66)) { return false }
            }
        }
        return true
    }
}

/// What a provider certificate allows: the topics of Apple's extension 1.2.840.113635.100.6.3.6 when
/// present, else the subject's UID (the bundle ID) (docs/apns-protocol.md §5).
struct CertificateIdentity: Sendable {
    /// Allowed topics, in certificate order.
    let topics: [String]
    /// The subject in RFC 2253 form, for the admin API.
    let subject: String

    init(_ certificate: HTTP2PeerCertificate) {
        subject = certificate.subject
        let listed = APNsCertificateCredentials.topics(inCertificateDER: certificate.der)
        if !listed.isEmpty {
            topics = listed
        } else if let uid = certificate.subjectComponent("UID") ?? certificate.subjectComponent("userId") {
            topics = [uid]
        } else {
            topics = []
        }
    }

    /// The one topic a request may omit `apns-topic` for: the certificate's only topic (a
    /// certificate listing several topics needs the header, docs/apns-protocol.md §2).
    var defaultTopic: String? { topics.count == 1 ? topics[0] : nil }
}
