/// An RPC of a protobuf service: its HTTP/2 `:path`, message types and streaming kind, for a gRPC layer.
public protocol ProtobufRPCMethod {
    /// The request message.
    associatedtype Input: ProtobufMessage
    /// The response message.
    associatedtype Output: ProtobufMessage
    /// `/<package>.<Service>/<Method>`, the gRPC request path (gRPC over HTTP/2 protocol, "Path").
    static var path: String { get }
    /// Whether the client sends a stream of requests (`rpc M(stream In)`). Default false.
    static var isClientStreaming: Bool { get }
    /// Whether the server answers with a stream of responses (`returns (stream Out)`). Default false.
    static var isServerStreaming: Bool { get }
}

extension ProtobufRPCMethod {
    /// Unary unless the generated method says otherwise.
    public static var isClientStreaming: Bool { false }
    /// Unary unless the generated method says otherwise.
    public static var isServerStreaming: Bool { false }
}
