internal import COpenSSL
import Foundation
import Synchronization

extension UUID {
    /// A random UUID (version 4, RFC 9562 §5.4): 16 bytes from OpenSSL's random generator
    /// (`RAND_bytes`, OpenSSL 3.0 manual page RAND_bytes(3)), with the version nibble set to 4 and the
    /// variant bits to `10` (RFC 9562 §4.1, §4.2).
    ///
    /// Foundation's `UUID()` reads the system's random device on Linux, opening, reading and closing it
    /// for each UUID (three system calls); a dispatcher makes one UUID per notification (its `apns-id`),
    /// so this one takes its bytes from a generator in user space that the system seeds, 4 KiB at a
    /// time (`RandomBytePool`): a profile of the dispatcher showed each `RAND_bytes` call setting its
    /// cipher up again (`EVP_CipherInit_ex`), which cost more than the 16 bytes themselves. Safe from
    /// any thread; not across `fork()`, whose child would hand out the parent's bytes again (no
    /// service here forks).
    /// - Returns: the version 4 UUID.
    public static func random() -> UUID {
        var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &bytes) { RandomBytePool.shared.fill($0) }
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

/// Random bytes from OpenSSL's generator (`RAND_bytes`), drawn `chunk` bytes at a time and handed
/// out in order, each byte once, under a lock. One `RAND_bytes` call costs about the same for 16
/// bytes as for a few KiB (its set-up, not the bytes, dominates in a profile), so callers that take a
/// few bytes each (a UUID per notification) share one draw. The lock is held through a refill, a few
/// microseconds once per 4 KiB.
final class RandomBytePool: Sendable {
    /// The process's pool (`UUID.random()`).
    static let shared = RandomBytePool(chunk: 4096)

    private struct State {
        var buffer: [UInt8]
        /// The first byte not handed out yet; `buffer.count` when all were.
        var next: Int
    }

    private let state: Mutex<State>

    /// - Parameter chunk: bytes drawn per `RAND_bytes` call (at least 16).
    init(chunk: Int) {
        self.state = Mutex(State(buffer: [UInt8](repeating: 0, count: max(chunk, 16)), next: max(chunk, 16)))
    }

    /// Fills `destination` with bytes no other call receives.
    func fill(_ destination: UnsafeMutableRawBufferPointer) {
        var written = 0
        state.withLock { state in
            while written < destination.count {
                if state.next == state.buffer.count {
                    _ = shim_openssl_prepare()
                    let status = state.buffer.withUnsafeMutableBytes { RAND_bytes($0.baseAddress, Int32($0.count)) }
                    // RAND_bytes fails only when the generator cannot be seeded, which no caller can recover from.
                    precondition(status == 1, "OpenSSL RAND_bytes failed: the random generator is not seeded")
                    state.next = 0
                }
                let count = min(destination.count - written, state.buffer.count - state.next)
                state.buffer.withUnsafeBytes { source in
                    destination.baseAddress!.advanced(by: written).copyMemory(
                        from: source.baseAddress!.advanced(by: state.next), byteCount: count)
                }
                // Handed out once: zeroed so the pool keeps no copy of bytes a caller now owns.
                state.buffer.withUnsafeMutableBytes { _ = $0.baseAddress!.advanced(by: state.next).initializeMemory(as: UInt8.self, repeating: 0, count: count) }
                state.next += count
                written += count
            }
        }
    }
}

/// A `RandomNumberGenerator` over `RandomBytePool.shared`: 8 bytes of OpenSSL's generator per
/// `next()`, with no system call (`SystemRandomNumberGenerator` makes one per call).
public struct PooledRandomNumberGenerator: RandomNumberGenerator {
    public init() {}

    /// - Returns: 64 random bits.
    public mutating func next() -> UInt64 {
        var value: UInt64 = 0
        withUnsafeMutableBytes(of: &value) { RandomBytePool.shared.fill($0) }
        return value
    }
}
