/// An immutable heap box that gives a recursive message field (a `Tree` holding a `Tree?`) a fixed
/// size; generated code hides it behind an ordinary optional property. Equality and hashing are
/// the boxed value's.
public final class ProtobufBox<Value: Sendable & Hashable>: Sendable, Hashable {
    /// The boxed value.
    public let value: Value

    /// Boxes `value`.
    public init(_ value: Value) { self.value = value }

    public static func == (lhs: ProtobufBox, rhs: ProtobufBox) -> Bool { lhs.value == rhs.value }

    public func hash(into hasher: inout Hasher) { hasher.combine(value) }
}
