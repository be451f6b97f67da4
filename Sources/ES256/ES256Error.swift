/// An ES256 key that cannot be read or used, or a signature OpenSSL could not make; `message` says
/// what is wrong (with OpenSSL's own error lines where it gave some) and never holds key material.
public struct ES256Error: Error, Sendable, CustomStringConvertible {
    /// What is wrong, e.g. `the public key is a RSA key, not EC; ES256 needs EC P-256`.
    public let message: String

    /// - Parameter message: what is wrong.
    public init(_ message: String) { self.message = message }

    /// The message.
    public var description: String { message }
}
