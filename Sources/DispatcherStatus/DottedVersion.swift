/// An app or OS version compared as a tuple of integers ("17.4.1" → (17, 4, 1)), so that "1.10" is
/// greater than "1.9" and "1.2" equals "1.2.0" (trailing zero components are ignored).
///
/// The text must be dotted decimal digits, each component 1 to 9 digits ("17", "17.4", "2.0.13");
/// anything else (letters, empty components, a sign) is not a version. The SQL function
/// `push_version_tuple(text)` (migration 5) reads stored versions by the same rule, so that the
/// audience filter compares in PostgreSQL exactly as this type does in Swift.
public struct DottedVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The components with trailing zeros removed ("1.2.0" → [1, 2]; "0" → []).
    public let components: [Int]
    /// The text as given.
    public let text: String

    /// - Returns: nil when `text` is not dotted decimal digits of 1 to 9 digits per component.
    public init?(_ text: String) {
        var components: [Int] = []
        for part in text.split(separator: ".", omittingEmptySubsequences: false) {
            guard (1...9).contains(part.utf8.count), part.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = Int(part) else {
                return nil
            }
            components.append(value)
        }
        while components.last == 0 { components.removeLast() }
        self.components = components
        self.text = text
    }

    public static func < (lhs: DottedVersion, rhs: DottedVersion) -> Bool {
        lhs.components.lexicographicallyPrecedes(rhs.components)
    }

    public static func == (lhs: DottedVersion, rhs: DottedVersion) -> Bool { lhs.components == rhs.components }

    public func hash(into hasher: inout Hasher) { hasher.combine(components) }

    public var description: String { text }

    /// The components as PostgreSQL `integer`s, the elements of what `push_version_tuple` returns
    /// (a component has at most 9 digits, so it always fits).
    public var int32Components: [Int32] { components.map { Int32($0) } }
}
