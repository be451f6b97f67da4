import Foundation
import HTTP2
import Kafka
import ServiceCore
import Synchronization
import Testing

@testable import GRPC
@testable import RegistrationServiceCore

/// The service under a `ServiceGroup`: it binds and connects only in `run`, stops gracefully on the
/// trigger, and a start-up failure ends the group with that error.
@Suite(.timeLimit(.minutes(1)))
struct RegistrationServiceLifecycleTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    let logger = Logger(label: "registration-lifecycle-test", logLevel: .warning)

    func configuration(_ cluster: KafkaMockCluster, port: Int = 0) -> RegistrationService.Configuration {
        var configuration = RegistrationService.Configuration(
            producer: .init(bootstrapServers: [cluster.bootstrapServers]), server: .init(http2: .init(host: "127.0.0.1", port: port)))
        configuration.fitShutdown(into: .seconds(10))
        configuration.auth.disabled = true  // these tests are about the lifecycle; auth has its own
        return configuration
    }

    @Test func listensOnlyWhileRunningAndStopsGracefully() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let port = Mutex<Int?>(nil)
        let service = RegistrationService(configuration: configuration(cluster), logger: logger) { bound in
            port.withLock { $0 = bound }
        }
        let group = ServiceGroup(services: [service], configuration: .init(signals: [], gracePeriod: .seconds(10)), logger: logger)
        let run = Task { try await group.run() }
        let deadline = ContinuousClock.now + .seconds(20)
        while port.withLock({ $0 }) == nil && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        let bound = try #require(port.withLock { $0 })
        #expect(canConnect(port: bound))
        group.triggerGracefulShutdown()
        #expect(try await run.value == .graceful)
        #expect(!canConnect(port: bound))
    }

    /// Health follows the lifecycle: SERVING once Kafka answers; on graceful shutdown an open Watch
    /// receives NOT_SERVING and ends (OK), so it does not hold the drain, and the group ends gracefully.
    @Test func healthWatchSeesNotServingAtShutdownAndDoesNotHoldTheDrain() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let port = Mutex<Int?>(nil)
        var settings = configuration(cluster)
        settings.healthProbeInterval = .milliseconds(200)
        let service = RegistrationService(configuration: settings, logger: logger) { bound in port.withLock { $0 = bound } }
        let group = ServiceGroup(services: [service], configuration: .init(signals: [], gracePeriod: .seconds(10)), logger: logger)
        let run = Task { try await group.run() }
        let deadline = ContinuousClock.now + .seconds(20)
        while port.withLock({ $0 }) == nil && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        let bound = try #require(port.withLock { $0 })
        let connection = try await HTTP2Connection.connect(host: "127.0.0.1", port: bound)
        func call(_ path: String, _ request: HealthCheckRequest) async throws -> HTTP2Response {
            try await connection.send(HTTP2Request(
                method: "POST", path: path, headers: [HTTP2Header("content-type", "application/grpc"), HTTP2Header("te", "trailers")],
                body: GRPCWire.frame(request.serializedBytes())), timeout: .seconds(30))
        }
        func statuses(_ response: HTTP2Response) throws -> [HealthCheckResponse.ServingStatus] {
            try GRPCWire.unframeAll(response.body, maxSize: 1 << 10).map { try HealthCheckResponse(protobufBytes: $0).status }
        }
        var serving = false
        while !serving && ContinuousClock.now < deadline {
            serving = try statuses(await call(Health.Check.path, HealthCheckRequest())) == [.serving]
            if !serving { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(serving, "SERVING once the broker answers")
        let watch = Task { try await call(Health.Watch.path, HealthCheckRequest(service: "push.v1.TokenRegistry")) }
        try await Task.sleep(for: .milliseconds(300))  // let the Watch start; its first message is SERVING either way
        group.triggerGracefulShutdown()
        let response = try await watch.value
        #expect(try statuses(response) == [.serving, .notServing])
        #expect(response.trailers.first { $0.name == "grpc-status" }?.value == "0")
        #expect(try await run.value == .graceful)
        await connection.close()
    }

    /// With Kafka unreachable, the topic watch's metadata request (10 s timeout) and a health probe (5 s)
    /// are in progress when graceful shutdown starts: `run` waits for neither (they end on their own
    /// threads), so the group ends gracefully at once, as when they were unstructured tasks.
    @Test func gracefulShutdownDoesNotWaitForKafkaProbesInProgress() async throws {
        var settings = RegistrationService.Configuration(
            producer: .init(bootstrapServers: ["127.0.0.1:1"]), server: .init(http2: .init(host: "127.0.0.1", port: 0)))
        settings.fitShutdown(into: .seconds(20))
        settings.auth.disabled = true
        settings.healthProbeInterval = .seconds(5)
        let port = Mutex<Int?>(nil)
        let service = RegistrationService(configuration: settings, logger: logger) { bound in port.withLock { $0 = bound } }
        let group = ServiceGroup(services: [service], configuration: .init(signals: [], gracePeriod: .seconds(20)), logger: logger)
        let run = Task { try await group.run() }
        let deadline = ContinuousClock.now + .seconds(20)
        while port.withLock({ $0 }) == nil && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        _ = try #require(port.withLock { $0 })
        try await Task.sleep(for: .milliseconds(500))  // the first topic check and health probe are blocked now
        #expect(service.topicWatch.status == .unknown)
        let clock = ContinuousClock()
        let start = clock.now
        group.triggerGracefulShutdown()
        #expect(try await run.value == .graceful)
        #expect(clock.now - start < .seconds(3))
    }

    @Test func aBindFailureInRunEndsTheGroupWithTheError() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        // Keep a port busy: the service must fail in `run`, not when it is created.
        let busy = try #require(listeningSocket())
        defer { close(busy.fd) }
        let service = RegistrationService(configuration: configuration(cluster, port: busy.port), logger: logger)
        let group = ServiceGroup(services: [service], configuration: .init(signals: [], gracePeriod: .seconds(10)), logger: logger)
        await #expect(throws: (any Error).self) { try await group.run() }
    }
}

/// Whether a TCP connection to 127.0.0.1:`port` is accepted.
private func canConnect(port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}

/// A socket listening on a kernel-chosen loopback port.
private func listeningSocket() -> (fd: Int32, port: Int)? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && listen(fd, 8) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard ok else {
        close(fd)
        return nil
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}
