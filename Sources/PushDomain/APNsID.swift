import Foundation
import ServiceCore
/// The `apns-id` header: a canonical UUID in lowercase, 8-4-4-4-12 hex digits (docs/apns-protocol.md §2).
/// APNs echoes it in the response; a malformed one gets 400 `BadMessageId`.
public struct APNsID: Hashable, Sendable, CustomStringConvertible {
    /// The lowercase UUID text, e.g. `123e4567-e89b-12d3-a456-426614174000`.
    public let uuidString: String

    /// Validates `text` as 8-4-4-4-12 hex digits in any case and keeps it in lowercase.
    /// - Throws: `PushDomainError` with reason `BadMessageId` otherwise.
    public init(validating text: String) throws(PushDomainError) {
        let utf8 = Array(text.utf8)
        let dashes: Set<Int> = [8, 13, 18, 23]
        var valid = utf8.count == 36
        if valid {
            for (index, byte) in utf8.enumerated() {
                let isHex = (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x66)
                if dashes.contains(index) ? byte != UInt8(ascii: "-") : !isHex { valid = false; break }
            }
        }
        guard valid else {
            throw PushDomainError("apns-id \"\(text)\" is not a canonical UUID (8-4-4-4-12 hex digits)", apnsReason: "BadMessageId")
        }
        uuidString = text.lowercased()
    }

    /// A random (version 4, RFC 9562 §5.4) UUID, from `UUID.random()`.
    public static func random() -> APNsID {
        APNsID(checked: UUID.random().lowercasedString)
    }

    private init(checked: String) { uuidString = checked }

    /// The lowercase UUID text.
    public var description: String { uuidString }
}
