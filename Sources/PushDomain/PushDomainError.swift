/// A value that breaks one of the push domain's rules (a device token, an `apns-id`), with what is
/// wrong and the reason string Apple answers for it (`BadDeviceToken`, `BadMessageId`,
/// docs/apns-protocol.md §3), so that the APNs client and simulator can answer as APNs does.
public struct PushDomainError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, e.g. `device token is empty`.
    public let message: String
    /// The reason APNs gives for such a value, e.g. `BadDeviceToken`.
    public let apnsReason: String

    /// - Parameters:
    ///   - message: what is wrong.
    ///   - apnsReason: Apple's reason string for it.
    public init(_ message: String, apnsReason: String) {
        self.message = message
        self.apnsReason = apnsReason
    }

    /// The message.
    public var description: String { message }
}
