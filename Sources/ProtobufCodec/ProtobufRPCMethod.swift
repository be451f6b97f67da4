/// An RPC of a protobuf service: its HTTP/2 `:path` and message types, for a gRPC layer.
public protocol ProtobufRPCMethod {
    /// The request message.
    associatedtype Input: ProtobufMessage
    /// The response message.
    associatedtype Output: ProtobufMessage
    /// `/<package>.<Service>/<Method>`, the gRPC request path (gRPC over HTTP/2 protocol, "Path").
    static var path: String { get }
}
