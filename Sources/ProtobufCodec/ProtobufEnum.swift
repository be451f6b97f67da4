/// A proto3 enum in Swift: one case per value plus `unrecognized(Int32)`, because proto3 enums are
/// open: a number this version does not know is kept and written back unchanged
/// (protobuf.dev/programming-guides/enum).
public protocol ProtobufEnum: Sendable, Hashable, RawRepresentable where RawValue == Int32 {
    /// The full protobuf name, such as `push.v1.PushType`.
    static var protoEnumName: String { get }
    /// The value numbered `rawValue`: a named case, or `unrecognized(rawValue)`.
    init(rawValue: Int32)
    /// The value's name in the `.proto` file (`PUSH_TYPE_ALERT`), used in JSON; `nil` for an
    /// unrecognized number.
    var protoName: String? { get }
    /// The value named `protoName` in the `.proto` file, or `nil`.
    init?(protoName: String)
}
