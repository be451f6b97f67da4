internal import COpenSSL
import Foundation

extension UUID {
    /// A random UUID (version 4, RFC 9562 §5.4): 16 bytes from OpenSSL's per-thread random generator
    /// (`RAND_bytes`, OpenSSL 3.0 manual page RAND_bytes(3)), with the version nibble set to 4 and the
    /// variant bits to `10` (RFC 9562 §4.1, §4.2).
    ///
    /// Foundation's `UUID()` reads the system's random device on Linux, opening, reading and closing it
    /// for each UUID (three system calls); a dispatcher makes one UUID per notification (its `apns-id`),
    /// so this one takes its bytes from a generator in user space that the system seeds. OpenSSL still
    /// asks `getpid()` once per call, to notice a fork.
    /// - Returns: the version 4 UUID.
    public static func random() -> UUID {
        _ = shim_openssl_prepare()
        var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let status = withUnsafeMutableBytes(of: &bytes) { RAND_bytes($0.baseAddress, Int32($0.count)) }
        // RAND_bytes fails only when the generator cannot be seeded, which no caller can recover from.
        precondition(status == 1, "OpenSSL RAND_bytes failed: the random generator is not seeded")
        bytes.6 = (bytes.6 & 0x0F) | 0x40  // version 4
        bytes.8 = (bytes.8 & 0x3F) | 0x80  // variant 10xx (RFC 9562)
        return UUID(uuid: bytes)
    }

    /// The UUID's text in lowercase, 8-4-4-4-12 hex digits (RFC 9562 §4 asks for lowercase on output), e.g.
    /// `123e4567-e89b-12d3-a456-426614174000`: `uuidString.lowercased()` built in one allocation.
    public var lowercasedString: String {
        withUnsafeBytes(of: uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { text in
                let digits: StaticString = "0123456789abcdef"
                var at = 0
                for (index, byte) in bytes.enumerated() {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        text[at] = UInt8(ascii: "-")
                        at += 1
                    }
                    text[at] = digits.utf8Start[Int(byte >> 4)]
                    text[at + 1] = digits.utf8Start[Int(byte & 0x0F)]
                    at += 2
                }
                return at
            }
        }
    }
}
