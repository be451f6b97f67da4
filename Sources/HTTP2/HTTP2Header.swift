/// One HTTP/2 header field (RFC 9113 §8.2). Names are lowercase on the wire; the module lowercases
/// names given with uppercase ASCII before sending. Lists of headers keep their order and duplicates.
public struct HTTP2Header: Hashable, Sendable, CustomStringConvertible {
    /// The field name, lowercase (for example `apns-topic`).
    public var name: String
    /// The field value.
    public var value: String

    /// Creates a header field.
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    public var description: String { "\(name): \(value)" }
}

extension Array where Element == HTTP2Header {
    /// The value of the first field called `name` (compared case-insensitively), or `nil`.
    public func first(_ name: String) -> String? {
        let lower = name.lowercased()
        return first { $0.name == lower }?.value
    }

    /// Every value of the fields called `name`, in order.
    public func all(_ name: String) -> [String] {
        let lower = name.lowercased()
        return filter { $0.name == lower }.map(\.value)
    }
}
