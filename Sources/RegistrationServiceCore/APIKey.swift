import Foundation
import ProtobufCodec
import ServiceCore

/// An API key as app backends present it: `pk_<id>_<secret>`, where `<id>` (1 to 64 of `a-z`, `0-9`,
/// `-`) names the key in the key file and `<secret>` is 32 random bytes in base64url without padding
/// (43 characters). The key file stores only the SHA-256 of the whole string, so a stolen file does not
/// reveal keys; 256 random bits need no slow password hash (docs/registration-auth.md).
public struct APIKey: Sendable, CustomStringConvertible {
    /// The key id, not secret.
    public let id: String
    /// The whole key, a secret: never log it.
    public let text: String

    /// Parses a presented key; nil when it does not have the `pk_<id>_<secret>` shape.
    public init?(_ text: String) {
        guard text.hasPrefix("pk_"), text.utf8.count <= 200 else { return nil }
        let rest = text.dropFirst(3)
        guard let separator = rest.firstIndex(of: "_") else { return nil }
        let id = rest[..<separator]
        let secret = rest[rest.index(after: separator)...]
        guard Self.isValidID(id), secret.utf8.count == 43, Base64.decode(secret, alphabet: .url)?.count == 32 else { return nil }
        self.id = String(id)
        self.text = text
    }

    /// Makes a new key with 32 bytes from the system's random generator.
    /// - Parameter id: the key id (1 to 64 of `a-z`, `0-9`, `-`).
    public static func generate(id: String) -> APIKey? {
        var generator = SystemRandomNumberGenerator()
        let secret = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return APIKey("pk_\(id)_" + Base64.encodeURL(secret))
    }

    /// SHA-256 of the key's UTF-8 text, the value the key file stores (as lowercase hex).
    public var sha256: [UInt8] { Digest.sha256(Array(text.utf8)) }

    /// Whether `id` is a valid key id.
    static func isValidID(_ id: Substring) -> Bool {
        !id.isEmpty && id.utf8.count <= 64
            && id.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
    }

    /// The id only.
    public var description: String { "APIKey(id: \(id))" }
}
