import ProtobufCodec

/// gRPC server reflection (`grpc.reflection.v1.ServerReflection` and the older, wire-identical
/// `grpc.reflection.v1alpha.ServerReflection`), as specified in
/// https://github.com/grpc/grpc/blob/master/doc/server-reflection.md, answered from a
/// FileDescriptorSet made by `protoc --include_imports`.
///
/// Answers `list_services` (the services given), `file_by_filename` and `file_containing_symbol`
/// (the file with its transitive dependencies, dependencies first), and `all_extension_numbers_of_type`
/// (always none: the set declares no extensions); anything else gets an `error_response` with
/// NOT_FOUND or UNIMPLEMENTED, as the specification asks, and the stream goes on. The request stream
/// is read whole before answering (clients such as grpcio-reflection's send and half-close).
public struct GRPCReflectionService: Sendable {
    private let index: DescriptorIndex
    private let services: [String]

    /// - Parameters:
    ///   - descriptorSet: a serialized `google.protobuf.FileDescriptorSet`.
    ///   - services: fully qualified names of the services the server offers, as `list_services` reports them.
    /// - Throws: `ProtobufError` when the set cannot be decoded.
    public init(descriptorSet: [UInt8], services: [String]) throws(ProtobufError) {
        index = try DescriptorIndex(descriptorSet)
        self.services = services
    }

    /// The symbols the set declares (packages excluded), for tests.
    public var symbols: Set<String> { Set(index.fileOfSymbol.keys) }

    /// Adds `ServerReflectionInfo` of v1 and v1alpha to `router`.
    public func register(into router: inout GRPCRouter) {
        router.registerStreaming(ServerReflection.ServerReflectionInfo.self) { requests, _, responses in
            for request in requests { responses.send(answer(request)) }
        }
        router.registerStreaming(V1AlphaServerReflectionInfo.self) { requests, _, responses in
            for request in requests { responses.send(answer(request)) }
        }
    }

    /// The answer to one reflection request.
    func answer(_ request: ServerReflectionRequest) -> ServerReflectionResponse {
        var response = ServerReflectionResponse()
        response.validHost = request.host
        response.originalRequest = request
        func error(_ code: GRPCStatus.Code, _ message: String) -> ServerReflectionResponse.MessageResponse {
            .errorResponse(ErrorResponse(errorCode: Int32(code.rawValue), errorMessage: message))
        }
        switch request.messageRequest {
        case .listServices?:
            response.messageResponse = .listServicesResponse(ListServiceResponse(service: services.map { ServiceResponse(name: $0) }))
        case .fileByFilename(let name)?:
            response.messageResponse = index.files[name] == nil
                ? error(.notFound, "unknown file \(name)")
                : .fileDescriptorResponse(FileDescriptorResponse(fileDescriptorProto: index.withDependencies(name)))
        case .fileContainingSymbol(let symbol)?:
            if let file = index.fileOfSymbol[symbol] {
                response.messageResponse = .fileDescriptorResponse(FileDescriptorResponse(fileDescriptorProto: index.withDependencies(file)))
            } else {
                response.messageResponse = error(.notFound, "unknown symbol \(symbol)")
            }
        case .allExtensionNumbersOfType(let type)?:
            response.messageResponse = index.fileOfSymbol[type] == nil
                ? error(.notFound, "unknown type \(type)")
                : .allExtensionNumbersResponse(ExtensionNumberResponse(baseTypeName: type, extensionNumber: []))
        case .fileContainingExtension(let extensionRequest)?:
            response.messageResponse = error(.notFound, "no extension \(extensionRequest.extensionNumber) of \(extensionRequest.containingType)")
        case nil:
            response.messageResponse = error(.unimplemented, "the request names no known message_request")
        }
        return response
    }
}

/// `grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo`: the v1 messages on the v1alpha path
/// (the two protos are wire-identical; Protos/grpc/reflection/v1alpha/reflection.proto).
enum V1AlphaServerReflectionInfo: ProtobufRPCMethod {
    typealias Input = ServerReflectionRequest
    typealias Output = ServerReflectionResponse
    static let path = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
    static let isClientStreaming = true
    static let isServerStreaming = true
}

/// The files of a FileDescriptorSet by name, and the file declaring each fully qualified symbol
/// (messages and enums, nested ones too, services and their methods), read from the
/// `google.protobuf.FileDescriptorProto` wire format (descriptor.proto field numbers).
struct DescriptorIndex: Sendable {
    /// Serialized FileDescriptorProto by file name.
    var files: [String: [UInt8]] = [:]
    /// Each file's direct dependencies.
    var dependencies: [String: [String]] = [:]
    /// The file declaring each symbol.
    var fileOfSymbol: [String: String] = [:]

    init(_ set: [UInt8]) throws(ProtobufError) {
        var reader = ProtobufReader(bytes: set)
        while let tag = try reader.readTag() {
            if tag.number == 1 && tag.wireType == .lengthDelimited {
                try addFile(reader.readLengthDelimitedBytes())
            } else {
                try reader.skipField(tag)
            }
        }
    }

    private mutating func addFile(_ bytes: [UInt8]) throws(ProtobufError) {
        var reader = ProtobufReader(bytes: bytes)
        var name = ""
        var package = ""
        var dependencies: [String] = []
        var declarations: [(kind: Int, bytes: [UInt8])] = []
        while let tag = try reader.readTag() {
            switch (tag.number, tag.wireType) {
            case (1, .lengthDelimited): name = try reader.readLengthDelimitedString()
            case (2, .lengthDelimited): package = try reader.readLengthDelimitedString()
            case (3, .lengthDelimited): dependencies.append(try reader.readLengthDelimitedString())
            case (4, .lengthDelimited), (5, .lengthDelimited), (6, .lengthDelimited):
                declarations.append((tag.number, try reader.readLengthDelimitedBytes()))
            default: try reader.skipField(tag)
            }
        }
        files[name] = bytes
        self.dependencies[name] = dependencies
        let prefix = package.isEmpty ? "" : package + "."
        for declaration in declarations {
            try addSymbols(declaration.bytes, kind: declaration.kind, prefix: prefix, file: name)
        }
    }

    /// kind 4: DescriptorProto (name 1, nested_type 3, enum_type 4); 5: EnumDescriptorProto (name 1);
    /// 6: ServiceDescriptorProto (name 1, method 2 with name 1).
    private mutating func addSymbols(_ bytes: [UInt8], kind: Int, prefix: String, file: String) throws(ProtobufError) {
        var reader = ProtobufReader(bytes: bytes)
        var name = ""
        var nested: [(kind: Int, bytes: [UInt8])] = []
        var methods: [[UInt8]] = []
        while let tag = try reader.readTag() {
            switch (tag.number, tag.wireType) {
            case (1, .lengthDelimited): name = try reader.readLengthDelimitedString()
            case (3, .lengthDelimited) where kind == 4: nested.append((4, try reader.readLengthDelimitedBytes()))
            case (4, .lengthDelimited) where kind == 4: nested.append((5, try reader.readLengthDelimitedBytes()))
            case (2, .lengthDelimited) where kind == 6: methods.append(try reader.readLengthDelimitedBytes())
            default: try reader.skipField(tag)
            }
        }
        let full = prefix + name
        fileOfSymbol[full] = file
        for inner in nested { try addSymbols(inner.bytes, kind: inner.kind, prefix: full + ".", file: file) }
        for method in methods {
            var methodReader = ProtobufReader(bytes: method)
            while let tag = try methodReader.readTag() {
                if tag.number == 1 && tag.wireType == .lengthDelimited {
                    fileOfSymbol[full + "." + (try methodReader.readLengthDelimitedString())] = file
                } else {
                    try methodReader.skipField(tag)
                }
            }
        }
    }

    /// `file` and its transitive dependencies, each once, dependencies before the files using them.
    func withDependencies(_ file: String) -> [[UInt8]] {
        var seen = Set<String>()
        var ordered: [[UInt8]] = []
        func visit(_ name: String) {
            guard seen.insert(name).inserted, let bytes = files[name] else { return }
            for dependency in dependencies[name] ?? [] { visit(dependency) }
            ordered.append(bytes)
        }
        visit(file)
        return ordered
    }
}
