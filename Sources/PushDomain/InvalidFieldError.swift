/// A push.v1 message field that breaks a rule; `description` is `field: problem`, with the field's
/// proto path (`device.device_token`), so that whoever sent it sees at once what to fix.
public struct InvalidFieldError: Error, Sendable, CustomStringConvertible {
    /// The proto path of the field.
    public let field: String
    /// What is wrong with it.
    public let problem: String

    public init(_ field: String, _ problem: String) {
        self.field = field
        self.problem = problem
    }

    public var description: String { "\(field): \(problem)" }
}
