/// Fields a message did not recognise when it was decoded, kept as their exact wire bytes (tag
/// included, in arrival order) and written back after the known fields when it is encoded, so that
/// a service on an older contract forwards what a newer producer wrote.
public struct UnknownFields: Sendable, Hashable {
    /// The raw fields, each a tag followed by its value.
    public var bytes: [UInt8]

    /// No unknown fields.
    @inlinable
    public init() { bytes = [] }

    /// `bytes` must be whole fields (tag and value); they are written out verbatim.
    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// `true` when no unknown field was kept.
    @inlinable
    public var isEmpty: Bool { bytes.isEmpty }
}
