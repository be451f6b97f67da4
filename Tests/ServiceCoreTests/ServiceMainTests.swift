import Foundation
import Synchronization
import Testing

@testable import ServiceCore

/// `ServiceMain`: one load for `--help`, `--check-config` and start; infrastructure outlives the group.
@Suite struct ServiceMainTests {
    /// Counts how often it ran, returns at graceful shutdown.
    final class Probe: Service {
        let runs = Atomic<Int>(0)
        let fail: Bool
        init(fail: Bool = false) { self.fail = fail }
        func run(shutdown: GracefulShutdown) async throws {
            runs.add(1, ordering: .relaxed)
            if fail { throw CancellationError() }
            await shutdown.wait()
        }
    }

    static func program(_ probe: Probe, infrastructure: Probe? = nil, stopAtOnce: Bool = true) -> ServiceMain {
        ServiceMain(program: "probe", usage: "usage: probe") { env in
            let port = try env.int("PUSH_PROBE_PORT", default: 1234, in: 0...65535)
            let grace = try env.milliseconds("PUSH_PROBE_GRACE_MS", default: .seconds(1))
            _ = try env.required("PUSH_PROBE_NAME")
            _ = port
            return ServiceMain.Launch(gracePeriod: grace) { _ in
                final class StopAtOnce: Service {
                    func run(shutdown: GracefulShutdown) async throws {}
                }
                return ServiceMain.Start(
                    services: stopAtOnce ? [probe, StopAtOnce()] : [probe], infrastructure: infrastructure.map { [$0] } ?? [])
            }
        }
    }

    @Test func modes() {
        #expect(ServiceMain.Mode(arguments: []) == .start)
        #expect(ServiceMain.Mode(arguments: ["--help"]) == .help)
        #expect(ServiceMain.Mode(arguments: ["--check-config", "-h"]) == .help)
        #expect(ServiceMain.Mode(arguments: ["--check-config"]) == .checkConfig)
        #expect(ServiceMain.Mode(arguments: ["--port"]) == .unknown("--port"))
    }

    @Test func checkCollectsEveryProblemAndStartsNothing() async {
        let probe = Probe()
        let program = Self.program(probe)
        let loaded = program.loadSettings(environment: ["PUSH_PROBE_PORT": "70000", "PUSH_PROBE_GRACE_MS": "x", "LOG_LEVEL": "chatty"])
        #expect(loaded.environment.errors.map(\.variable) == ["LOG_LEVEL", "PUSH_PROBE_PORT", "PUSH_PROBE_GRACE_MS", "PUSH_PROBE_NAME"])
        #expect(loaded.launch == nil)
        #expect(await program.run(arguments: ["--check-config"], environment: ["PUSH_PROBE_PORT": "70000"]) == 2)
        #expect(await program.run(arguments: ["--check-config"], environment: ["PUSH_PROBE_NAME": "a"]) == 0)
        #expect(await program.run(arguments: ["--help"], environment: ["PUSH_PROBE_NAME": "a"]) == 0)
        // Start with a bad setting: status 1, nothing ran.
        #expect(await program.run(arguments: [], environment: ["PUSH_PROBE_PORT": "70000"]) == 1)
        #expect(probe.runs.load(ordering: .relaxed) == 0)
        #expect(program.helpText().contains("PUSH_PROBE_PORT [1234]"))
        #expect(program.helpText().contains("PUSH_PROBE_NAME\n") || program.helpText().hasSuffix("PUSH_PROBE_NAME"))
    }

    @Test func startRunsServicesAndStopsInfrastructureAfterThem() async {
        let probe = Probe()
        let admin = Probe()
        let program = Self.program(probe, infrastructure: admin)
        // One service returns at once: the group shuts down gracefully, then the infrastructure stops.
        #expect(await program.run(arguments: [], environment: ["PUSH_PROBE_NAME": "a"]) == 0)
        #expect(probe.runs.load(ordering: .relaxed) == 1 && admin.runs.load(ordering: .relaxed) == 1)
    }

    @Test func failingInfrastructureStopsTheGroupWithStatus1() async {
        let probe = Probe()
        let program = Self.program(probe, infrastructure: Probe(fail: true), stopAtOnce: false)
        #expect(await program.run(arguments: [], environment: ["PUSH_PROBE_NAME": "a"]) == 1)
        #expect(probe.runs.load(ordering: .relaxed) == 1)
    }
}
