/// The admin port could not start.
public struct AdminServerError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public let message: String
    init(_ message: String) { self.message = message }
    public var description: String { "AdminServerError: \(message)" }
}
