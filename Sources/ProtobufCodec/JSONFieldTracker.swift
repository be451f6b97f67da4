/// Tracks which fields and oneofs a JSON object has set, so a field given twice (under either of
/// its names) or two members of one oneof are reported (the proto3 JSON mapping forbids both).
public struct JSONFieldTracker: Sendable {
    private var seenFields: [Int] = []
    private var seenOneofs: [(index: Int, key: String)] = []

    /// An empty tracker.
    public init() {}

    /// Records field `number`.
    /// - Throws: `.duplicateJSONField` when it was already set.
    public mutating func see(field number: Int) throws(ProtobufError) {
        guard !seenFields.contains(number) else {
            throw ProtobufError(.duplicateJSONField, "field given more than once")
        }
        seenFields.append(number)
    }

    /// Records field `number`, member `key` of oneof `oneofIndex` named `oneofName`.
    /// - Throws: `.duplicateJSONField` when the field or another member of the oneof was set.
    public mutating func see(field number: Int, oneof oneofIndex: Int, oneofName: String, key: String) throws(ProtobufError) {
        try see(field: number)
        if let earlier = seenOneofs.first(where: { $0.index == oneofIndex }) {
            throw ProtobufError(.duplicateJSONField, "oneof \(oneofName) already set by \"\(earlier.key)\"")
        }
        seenOneofs.append((oneofIndex, key))
    }
}
