// swift-tools-version:6.0
// Push-notification delivery platform: registration service, dispatcher and APNs simulator.
// No outside Swift packages: the four C libraries come from Debian through systemLibrary targets, and
// the dispatcher links Debian's jemalloc as its allocator.
import Foundation
import PackageDescription

// The test targets live under Tests/, which the Docker image's build context leaves out: declare them
// only when the directory is there, so `swift build` of the products needs Package.swift, Sources/ and
// Protos/ alone (Tests/e2e/test_image_context.py builds from exactly what the Dockerfile copies).
let packageDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
let hasTests = FileManager.default.fileExists(atPath: packageDirectory.appendingPathComponent("Tests").path)

let package = Package(
    name: "push",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "registration-service", targets: ["registration-service"]),
        .executable(name: "dispatcher", targets: ["dispatcher"]),
        .executable(name: "apns-simulator", targets: ["apns-simulator"]),
        .executable(name: "kafka-dev-broker", targets: ["kafka-dev-broker"]),
        .executable(name: "pushctl", targets: ["pushctl"]),
    ],
    dependencies: [],
    targets: [
        // C libraries (module.modulemap + shim.h only).
        .systemLibrary(name: "CRdKafka", pkgConfig: "rdkafka", providers: [.apt(["librdkafka-dev"])]),
        .systemLibrary(name: "CNghttp2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),

        // Foundations, bottom up. Each target's one job and the imports it may have are in docs/modules.md,
        // which Tests/ModuleGraphTests checks against the import lines and the dependencies below.
        // The codecs (protobuf, JSON, base64, JWT compact form): no dependency.
        .target(name: "ProtobufCodec"),
        // Services, settings, logging, metrics, digests: what every process needs.
        .target(name: "ServiceCore", dependencies: ["COpenSSL", "ProtobufCodec"]),
        // The push.v1 messages generated from Protos/.
        .target(name: "PushMessages", dependencies: ["ProtobufCodec"]),
        // The push domain's shared rules: device tokens, apns-ids, environments, push types and the token
        // kinds they need, topic names, and the push.v1 enums as these types.
        .target(name: "PushDomain", dependencies: ["ProtobufCodec", "PushMessages", "ServiceCore"]),
        // Transports: Kafka (no project topic), PostgreSQL, HTTP/2, gRPC.
        .target(name: "Kafka", dependencies: ["CRdKafka", "ProtobufCodec", "ServiceCore"]),
        .target(name: "Postgres", dependencies: ["CLibPQ", "ServiceCore"]),
        .target(name: "HTTP2", dependencies: ["CNghttp2", "COpenSSL", "ServiceCore"]),
        .target(name: "GRPC", dependencies: ["HTTP2", "ProtobufCodec", "ServiceCore"]),
        // The development broker: a mock cluster with the project's topics (kafka-dev-broker).
        .target(name: "KafkaDevBroker", dependencies: ["Kafka", "PushDomain", "ServiceCore"]),
        // ES256 (ECDSA P-256 + SHA-256, RFC 7518 §3.4) keys and JWS signatures on OpenSSL: the APNs client
        // signs provider tokens (and loads its certificates' keys with the same EVP_PKEY owner), the
        // simulator and the registration service verify JWTs.
        .target(name: "ES256", dependencies: ["COpenSSL", "ProtobufCodec"]),
        // The APNs client; the simulator, with the provider-token verification only it does.
        .target(name: "APNs", dependencies: ["COpenSSL", "ES256", "HTTP2", "ProtobufCodec", "PushDomain", "ServiceCore"]),
        .target(name: "APNsSimulator", dependencies: ["AdminHTTP", "APNs", "ES256", "HTTP2", "ProtobufCodec", "PushDomain", "ServiceCore"]),
        // HTTP/1.1 admin port (/metrics, /healthz, /readyz) of every executable, on libmicrohttpd.
        .target(name: "AdminHTTP", dependencies: ["CMicroHTTPD", "ServiceCore"]),

        // Service logic, testable without the executables. DispatcherStatus: what PostgreSQL says about a
        // request, read by the dispatcher's GET /v1/requests/<id> and by pushctl status, and the audience
        // of a campaign (AudienceQuery), counted by pushctl send and paged by the dispatcher.
        .target(
            name: "RegistrationServiceCore",
            dependencies: ["AdminHTTP", "ES256", "GRPC", "HTTP2", "Kafka", "ProtobufCodec", "PushDomain", "PushMessages", "ServiceCore"]),
        .target(name: "DispatcherStatus", dependencies: ["Postgres", "ProtobufCodec", "PushDomain", "PushMessages"]),
        // The dispatcher's APNs credentials registry (PUSH_APNS_CREDENTIALS_FILE): parsed as a value, keys
        // loaded; the dispatcher sends with it, pushctl credentials lists and checks it.
        .target(name: "APNsKeyRegistry", dependencies: ["APNs", "ProtobufCodec", "PushDomain", "ServiceCore"]),
        .target(
            name: "DispatcherCore",
            dependencies: [
                "AdminHTTP", "APNs", "APNsKeyRegistry", "DispatcherStatus", "Kafka", "Postgres", "ProtobufCodec", "PushDomain", "PushMessages", "ServiceCore",
            ]),

        // Executables: a few lines of main.swift each (apns-bench: the APNs client against the simulator, measured).
        .executableTarget(
            name: "registration-service",
            dependencies: ["AdminHTTP", "GRPC", "HTTP2", "Kafka", "RegistrationServiceCore", "ServiceCore"]),
        // The dispatcher allocates with jemalloc (Debian's libjemalloc2): its objects are made on one
        // thread and freed on another, and glibc's malloc locks the owning arena for that (README
        // "Operations", memory).
        .executableTarget(
            name: "dispatcher", dependencies: ["AdminHTTP", "APNs", "DispatcherCore", "Kafka", "Postgres", "ServiceCore"],
            linkerSettings: [.linkedLibrary("jemalloc", .when(platforms: [.linux]))]),
        .executableTarget(name: "apns-simulator", dependencies: ["AdminHTTP", "APNsSimulator", "HTTP2", "ServiceCore"]),
        .executableTarget(name: "kafka-dev-broker", dependencies: ["KafkaDevBroker"]),
        .executableTarget(name: "apns-bench", dependencies: ["APNs", "APNsSimulator", "PushDomain", "ServiceCore"]),
        // pushctl: the operator's command line (gRPC registration, sends, feedback, dead letters, tokens,
        // request status, simulator faults). Its logic is in PushCtlCore, tested without I/O; the request
        // status and the audience count are read as the dispatcher reads them (DispatcherStatus's
        // RequestStatusReader and AudienceQuery), without the dispatcher itself.
        .target(
            name: "PushCtlCore",
            dependencies: [
                "APNsKeyRegistry", "DispatcherStatus", "GRPC", "HTTP2", "Kafka", "Postgres", "ProtobufCodec", "PushDomain", "PushMessages", "ServiceCore",
            ]),
        .executableTarget(name: "pushctl", dependencies: ["PushCtlCore", "ServiceCore"]),
    ]
)

if hasTests {
    package.targets += [

        // Tests (Swift Testing) against real parts. Python oracles live beside some of them.
        .testTarget(name: "ServiceCoreTests", dependencies: ["PushTestSupport", "ServiceCore"]),
        .testTarget(name: "AdminHTTPTests", dependencies: ["AdminHTTP", "ServiceCore"]),
        .testTarget(name: "ProtobufCodecTests", dependencies: ["ProtobufCodec", "PushMessages"], exclude: ["Protos", "Python"]),
        .testTarget(name: "KafkaTests", dependencies: ["Kafka", "KafkaDevBroker", "PushTestSupport", "ServiceCore"]),
        // Helpers shared by test targets: a real PostgreSQL per suite, running outside programs.
        .target(name: "PushTestSupport", dependencies: ["Postgres", "ServiceCore"], path: "Tests/PushTestSupport"),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "PushTestSupport", "ServiceCore"]),
        .testTarget(name: "HTTP2Tests", dependencies: ["HTTP2", "ServiceCore"]),
        // The registration-service executable under attack (Python h2 and raw frames), RSS measured.
        .testTarget(name: "HTTP2AbuseTests", dependencies: ["Kafka", "PushTestSupport", "ServiceCore"], exclude: ["Python"]),
        .testTarget(name: "GRPCTests", dependencies: ["GRPC", "HTTP2", "ProtobufCodec", "PushMessages", "PushTestSupport", "ServiceCore"], exclude: ["Protos", "Python"]),
        .testTarget(name: "APNsTests", dependencies: ["APNs", "APNsSimulator", "ES256", "ProtobufCodec", "PushDomain", "ServiceCore"], exclude: ["Python"]),
        .testTarget(
            name: "APNsSimulatorTests", dependencies: ["APNsSimulator", "APNs", "HTTP2", "PushDomain", "PushTestSupport", "ServiceCore"],
            exclude: ["Python"]),
        .testTarget(
            name: "APNsClientTests", dependencies: ["APNs", "APNsSimulator", "HTTP2", "PushDomain", "PushTestSupport", "ServiceCore"],
            exclude: ["Python"]),
        .testTarget(
            name: "DispatcherCoreTests",
            dependencies: [
                "DispatcherCore", "APNs", "APNsKeyRegistry", "APNsSimulator", "DispatcherStatus", "Kafka", "Postgres", "PushDomain", "PushTestSupport", "PushMessages", "ServiceCore",
            ]),
        .testTarget(
            name: "RegistrationServiceCoreTests",
            dependencies: [
                "RegistrationServiceCore", "APNs", "GRPC", "Kafka", "ProtobufCodec", "PushDomain", "PushMessages", "PushTestSupport", "ServiceCore",
            ]),
        // docs/modules.md's import graph against Sources/ and this manifest, and the guard rails on the
        // dispatcher's and ServiceCore's sources (file and function lengths, no unstructured task); reads files only.
        .testTarget(name: "ModuleGraphTests"),
        .testTarget(name: "PushCtlCoreTests", dependencies: ["AdminHTTP", "APNsKeyRegistry", "DispatcherStatus", "PushCtlCore", "PushMessages", "ServiceCore"]),
    ]
}
