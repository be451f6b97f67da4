import AdminHTTP
import APNsSimulator
import Foundation
import HTTP2
import ServiceCore

// apns-simulator: Apple's APNs provider API for tests, benchmarks and staging systems.
// Environment: PUSH_SIM_HOST (127.0.0.1), PUSH_SIM_PRODUCTION_PORT (2197), PUSH_SIM_SANDBOX_PORT (2198),
// PUSH_SIM_ADMIN_PORT (8081; 0 picks one), PUSH_SIM_ADMIN_HOST (127.0.0.1: the admin API is development-only
// and unauthenticated), PUSH_HTTP2_* (limits of every listener, docs/http2-server-limits.md), PUSH_SIM_TLS_CERT_FILE, PUSH_SIM_TLS_KEY_FILE (required),
// PUSH_SIM_KEYS (KEYID:TEAMID:/path/pub.pem[:sandbox|:production],…), PUSH_SIM_CLIENT_CA_FILE (enables
// certificate auth), PUSH_SIM_CONFIG_FILE (JSON: faults, tokens, unregistered), PUSH_SIM_RECORD_LIMIT
// (10000), PUSH_SIM_EVENT_LOOPS (cores per listener), PUSH_SIM_INITIAL_MAX_CONCURRENT_STREAMS (1),
// PUSH_SIM_CLOCK_OFFSET_MS (unset: the system clock; set: the system clock moved by this, movable through
// POST /admin/clock {"offset_ms"|"advance_ms"}).
// `apns-simulator --check-config` validates the environment, prints the effective configuration and
// exits 0, or 2 naming every bad setting, without listening.
ProcessSignals.ignoreSIGPIPE()
let logger = Logger(label: "apns-simulator")
let checking = EnvironmentConfig.checkRequested
let env = EnvironmentConfig(collectingErrors: checking)
do {
    let certificate = try env.required("PUSH_SIM_TLS_CERT_FILE")
    let key = try env.required("PUSH_SIM_TLS_KEY_FILE")
    for (variable, path) in [("PUSH_SIM_TLS_CERT_FILE", certificate), ("PUSH_SIM_TLS_KEY_FILE", key)]
    where !path.isEmpty && !FileManager.default.isReadableFile(atPath: path) {
        try env.fail(variable, "cannot read \(path)")
    }
    let keys = env.string("PUSH_SIM_KEYS", default: "")
    var configuration = APNsSimulator.Configuration(
        certificateChainFile: certificate, privateKeyFile: key,
        trustedKeys: try env.attempt("PUSH_SIM_KEYS") { try APNsSimulator.TrustedKey.parseList(keys) } ?? [])
    configuration.host = env.string("PUSH_SIM_HOST", default: "127.0.0.1")
    configuration.productionPort = try env.int("PUSH_SIM_PRODUCTION_PORT", default: 2197, in: 0...65535)
    configuration.sandboxPort = try env.int("PUSH_SIM_SANDBOX_PORT", default: 2198, in: 0...65535)
    configuration.adminPort = try env.int("PUSH_SIM_ADMIN_PORT", default: 8081, in: 0...65535)
    configuration.adminHost = env.string("PUSH_SIM_ADMIN_HOST", default: "127.0.0.1")
    try HTTP2ServerLimits.apply(environment: env, to: &configuration.limits, settings: &configuration.settings)
    configuration.clientCAFile = env.string("PUSH_SIM_CLIENT_CA_FILE")
    configuration.recordLimit = try env.int("PUSH_SIM_RECORD_LIMIT", default: 10_000, in: 1...Int.max)
    configuration.eventLoopCount = try env.int("PUSH_SIM_EVENT_LOOPS", default: configuration.eventLoopCount, in: 1...Int.max)
    configuration.initialMaxConcurrentStreams = UInt32(clamping: try env.int("PUSH_SIM_INITIAL_MAX_CONCURRENT_STREAMS", default: 1, in: 1...Int.max))
    if env.string("PUSH_SIM_CLOCK_OFFSET_MS") != nil {
        configuration.clock = OffsetWallClock(offsetMilliseconds: Int64(try env.int("PUSH_SIM_CLOCK_OFFSET_MS", default: 0)))
    }
    if let path = env.string("PUSH_SIM_CONFIG_FILE") {
        _ = try env.attempt("PUSH_SIM_CONFIG_FILE") { try configuration.apply(configFile: path) }
    }
    if checking {
        print(env.checkReport(program: "apns-simulator"))
        exit(env.checkExitStatus)
    }
    let simulator = try APNsSimulator.start(configuration: configuration)
    // HTTP/1.1 admin port (README "Admin port"); the simulator's own admin API stays on PUSH_SIM_ADMIN_PORT.
    let readiness = ReadinessState()
    readiness.setPhase(.running)
    let admin = try AdminServer.start(environment: env, defaultPort: 9103, readiness: readiness)
    logger.info("apns-simulator ready", [
        "production_port": "\(simulator.productionPort)", "sandbox_port": "\(simulator.sandboxPort)",
        "admin_port": simulator.adminPort.map { "\($0)" } ?? "off",
        "certificate_auth": configuration.clientCAFile == nil ? "off" : "on", "metrics_admin_port": "\(admin.port)",
    ])
    let signal = await ProcessSignals.waitForTermination()
    logger.info("apns-simulator stopping", ["signal": "\(signal)"])
    readiness.setPhase(.stopping)
    await simulator.shutdown()
    admin.stop()
} catch {
    if checking {
        try? env.fail("(configuration)", "\(error)")
        print(env.checkReport(program: "apns-simulator"))
        exit(2)
    }
    logger.critical("apns-simulator failed to start: \(error)")
    exit(1)
}
