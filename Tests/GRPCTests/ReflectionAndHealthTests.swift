import ProtobufCodec
import PushMessages
import Testing

@testable import GRPC

/// Server reflection's answers and the health service's states, without I/O (the e2e tests call
/// both through grpcio, grpcio-reflection and grpcio-health-checking).
@Suite struct ReflectionAndHealthTests {
    let service: GRPCReflectionService

    init() throws {
        service = try GRPCReflectionService(descriptorSet: PushDescriptorSet.bytes, services: ["push.v1.TokenRegistry", "grpc.health.v1.Health"])
    }

    func fileNames(_ response: ServerReflectionResponse) throws -> [String] {
        guard case .fileDescriptorResponse(let files)? = response.messageResponse else { return [] }
        return try files.fileDescriptorProto.map { bytes in
            var reader = ProtobufReader(bytes: bytes)
            while let tag = try reader.readTag() {
                if tag.number == 1 { return try reader.readLengthDelimitedString() }
                try reader.skipField(tag)
            }
            return ""
        }
    }

    @Test func symbolsOfTheDescriptorSetAreIndexed() {
        for symbol in ["push.v1.TokenRegistry", "push.v1.TokenRegistry.ForgetUser", "push.v1.Device", "push.v1.TokenEvent.Action",
                       "grpc.health.v1.HealthCheckResponse.ServingStatus", "grpc.reflection.v1alpha.ServerReflection"] {
            #expect(service.symbols.contains(symbol), "\(symbol)")
        }
    }

    @Test func answersListFileAndSymbolRequests() throws {
        let list = service.answer(ServerReflectionRequest(host: "h", messageRequest: .listServices("")))
        #expect(list.validHost == "h")
        guard case .listServicesResponse(let services)? = list.messageResponse else { Issue.record("no list"); return }
        #expect(services.service.map(\.name) == ["push.v1.TokenRegistry", "grpc.health.v1.Health"])
        // Dependencies come first, each file once.
        #expect(try fileNames(service.answer(ServerReflectionRequest(messageRequest: .fileContainingSymbol("push.v1.TokenRegistry"))))
                == ["push/v1/common.proto", "push/v1/token_registry.proto"])
        #expect(try fileNames(service.answer(ServerReflectionRequest(messageRequest: .fileByFilename("grpc/health/v1/health.proto"))))
                == ["grpc/health/v1/health.proto"])
        let missing = service.answer(ServerReflectionRequest(messageRequest: .fileContainingSymbol("no.Such")))
        guard case .errorResponse(let error)? = missing.messageResponse else { Issue.record("no error"); return }
        #expect(error.errorCode == Int32(GRPCStatus.Code.notFound.rawValue))
    }

    @Test func healthStatusChangesAndShutdownIsFinal() {
        let health = GRPCHealthService(services: ["push.v1.TokenRegistry"])
        #expect(health.status(of: "") == .notServing && health.status(of: "push.v1.TokenRegistry") == .notServing)
        #expect(health.status(of: "unknown") == nil)
        health.setStatus(.serving)
        #expect(health.status(of: "push.v1.TokenRegistry") == .serving)
        health.enterShutdown()
        health.setStatus(.serving)
        #expect(health.status(of: "") == .notServing, "after shutdown began nothing turns it back to SERVING")
    }

    @Test func streamingBodiesUnframeEveryMessage() throws {
        let body = GRPCWire.frame([1, 2]) + GRPCWire.frame([]) + GRPCWire.frame([3])
        #expect(try GRPCWire.unframeAll(body, maxSize: 16) == [[1, 2], [], [3]])
        #expect(throws: GRPCStatus.self) { try GRPCWire.unframeAll(body.dropLast(), maxSize: 16) }
        #expect(throws: GRPCStatus.self) { try GRPCWire.unframeAll(GRPCWire.frame([UInt8](repeating: 0, count: 17)), maxSize: 16) }
    }
}
