// swift-tools-version:6.0
// Push-notification delivery platform: registration service, dispatcher and APNs simulator.
// No outside Swift packages: the four C libraries come from Debian through systemLibrary targets.
import PackageDescription

let package = Package(
    name: "push",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "registration-service", targets: ["registration-service"]),
        .executable(name: "dispatcher", targets: ["dispatcher"]),
        .executable(name: "apns-simulator", targets: ["apns-simulator"]),
        .executable(name: "kafka-dev-broker", targets: ["kafka-dev-broker"]),
    ],
    dependencies: [],
    targets: [
        // C libraries (module.modulemap + shim.h only).
        .systemLibrary(name: "CRdKafka", pkgConfig: "rdkafka", providers: [.apt(["librdkafka-dev"])]),
        .systemLibrary(name: "CNghttp2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),

        // Foundations.
        .target(name: "ServiceCore", dependencies: ["COpenSSL"]),
        .target(name: "ProtobufCodec"),
        .target(name: "PushMessages", dependencies: ["ProtobufCodec"]),
        .target(name: "Kafka", dependencies: ["CRdKafka", "ServiceCore"]),
        .target(name: "Postgres", dependencies: ["CLibPQ", "ServiceCore"]),
        .target(name: "HTTP2", dependencies: ["CNghttp2", "COpenSSL", "ServiceCore"]),
        .target(name: "GRPC", dependencies: ["HTTP2", "ProtobufCodec", "ServiceCore"]),
        .target(name: "APNs", dependencies: ["COpenSSL", "HTTP2", "PushMessages", "ServiceCore"]),
        .target(name: "APNsSimulator", dependencies: ["APNs", "HTTP2", "ServiceCore"]),

        // Service logic, testable without the executables.
        .target(
            name: "RegistrationServiceCore",
            dependencies: ["APNs", "GRPC", "HTTP2", "Kafka", "ProtobufCodec", "PushMessages", "ServiceCore"]),
        .target(
            name: "DispatcherCore",
            dependencies: ["APNs", "Kafka", "Postgres", "ProtobufCodec", "PushMessages", "ServiceCore"]),

        // Executables: a few lines of main.swift each.
        .executableTarget(
            name: "registration-service",
            dependencies: ["GRPC", "HTTP2", "Kafka", "RegistrationServiceCore", "ServiceCore"]),
        .executableTarget(
            name: "dispatcher", dependencies: ["APNs", "DispatcherCore", "Kafka", "Postgres", "ServiceCore"]),
        .executableTarget(name: "apns-simulator", dependencies: ["APNsSimulator", "ServiceCore"]),
        .executableTarget(name: "kafka-dev-broker", dependencies: ["Kafka", "ServiceCore"]),
        .executableTarget(name: "apns-bench", dependencies: ["APNs", "APNsSimulator", "ServiceCore"]),

        // Tests (Swift Testing) against real parts. Python oracles live beside some of them.
        .testTarget(name: "ServiceCoreTests", dependencies: ["PushTestSupport", "ServiceCore"]),
        .testTarget(name: "ProtobufCodecTests", dependencies: ["ProtobufCodec", "PushMessages"], exclude: ["Protos", "Python"]),
        .testTarget(name: "KafkaTests", dependencies: ["Kafka", "ServiceCore"]),
        // Helpers shared by test targets: a real PostgreSQL per suite, running outside programs.
        .target(name: "PushTestSupport", dependencies: ["Postgres", "ServiceCore"], path: "Tests/PushTestSupport"),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "PushTestSupport", "ServiceCore"]),
        .testTarget(name: "HTTP2Tests", dependencies: ["HTTP2", "ServiceCore"]),
        .testTarget(name: "GRPCTests", dependencies: ["GRPC", "HTTP2", "PushMessages", "ServiceCore"], exclude: ["Protos", "Python"]),
        .testTarget(name: "APNsTests", dependencies: ["APNs", "ServiceCore"], exclude: ["Python"]),
        .testTarget(
            name: "APNsSimulatorTests", dependencies: ["APNsSimulator", "APNs", "HTTP2", "PushTestSupport", "ServiceCore"],
            exclude: ["Python"]),
        .testTarget(name: "APNsClientTests", dependencies: ["APNs", "APNsSimulator", "HTTP2", "PushTestSupport", "ServiceCore"], exclude: ["Python"]),
        .testTarget(
            name: "DispatcherCoreTests",
            dependencies: ["DispatcherCore", "APNs", "Kafka", "Postgres", "PushTestSupport", "PushMessages", "ServiceCore"]),
        .testTarget(
            name: "RegistrationServiceCoreTests",
            dependencies: ["RegistrationServiceCore", "Kafka", "PushMessages", "ServiceCore"]),
    ]
)
