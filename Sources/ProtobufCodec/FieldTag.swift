/// One field's tag: its number and wire type.
public struct FieldTag: Sendable, Hashable {
    /// The field number, 1 to 2^29 - 1.
    public let number: Int
    /// How the value that follows is encoded.
    public let wireType: WireType

    /// The largest field number a `.proto` file may use: 2^29 - 1.
    public static let maximumNumber = (1 << 29) - 1

    /// A tag for field `number`, which must be in 1...``maximumNumber``.
    @inlinable
    public init(number: Int, wireType: WireType) {
        self.number = number
        self.wireType = wireType
    }

    /// The tag as it is written: `number << 3 | wireType`.
    @inlinable
    public var encoded: UInt32 { UInt32(truncatingIfNeeded: number) << 3 | UInt32(wireType.rawValue) }
}
