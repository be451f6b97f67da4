import APNsSimulator
import Foundation
import ServiceCore

// apns-simulator: Apple's APNs provider API for tests, benchmarks and staging systems.
// Environment: PUSH_SIM_HOST (127.0.0.1), PUSH_SIM_PRODUCTION_PORT (2197), PUSH_SIM_SANDBOX_PORT (2198),
// PUSH_SIM_ADMIN_PORT (8081; 0 picks one), PUSH_SIM_TLS_CERT_FILE, PUSH_SIM_TLS_KEY_FILE (required),
// PUSH_SIM_KEYS (KEYID:TEAMID:/path/pub.pem[:sandbox|:production],…), PUSH_SIM_CLIENT_CA_FILE (enables
// certificate auth), PUSH_SIM_CONFIG_FILE (JSON: faults, tokens, unregistered), PUSH_SIM_RECORD_LIMIT
// (10000), PUSH_SIM_EVENT_LOOPS (cores per listener), PUSH_SIM_INITIAL_MAX_CONCURRENT_STREAMS (1),
// PUSH_SIM_CLOCK_OFFSET_MS (unset: the system clock; set: the system clock moved by this, movable through
// POST /admin/clock {"offset_ms"|"advance_ms"}).
ProcessSignals.ignoreSIGPIPE()
let logger = Logger(label: "apns-simulator")
do {
    let env = EnvironmentConfig()
    var configuration = APNsSimulator.Configuration(
        certificateChainFile: try env.required("PUSH_SIM_TLS_CERT_FILE"),
        privateKeyFile: try env.required("PUSH_SIM_TLS_KEY_FILE"),
        trustedKeys: try APNsSimulator.TrustedKey.parseList(env.string("PUSH_SIM_KEYS", default: "")))
    configuration.host = env.string("PUSH_SIM_HOST", default: "127.0.0.1")
    configuration.productionPort = try env.int("PUSH_SIM_PRODUCTION_PORT", default: 2197)
    configuration.sandboxPort = try env.int("PUSH_SIM_SANDBOX_PORT", default: 2198)
    configuration.adminPort = try env.int("PUSH_SIM_ADMIN_PORT", default: 8081)
    configuration.clientCAFile = env.string("PUSH_SIM_CLIENT_CA_FILE")
    configuration.recordLimit = try env.int("PUSH_SIM_RECORD_LIMIT", default: 10_000)
    configuration.eventLoopCount = try env.int("PUSH_SIM_EVENT_LOOPS", default: configuration.eventLoopCount)
    configuration.initialMaxConcurrentStreams = UInt32(clamping: try env.int("PUSH_SIM_INITIAL_MAX_CONCURRENT_STREAMS", default: 1))
    if env.string("PUSH_SIM_CLOCK_OFFSET_MS") != nil {
        configuration.clock = OffsetWallClock(offsetMilliseconds: Int64(try env.int("PUSH_SIM_CLOCK_OFFSET_MS", default: 0)))
    }
    if let path = env.string("PUSH_SIM_CONFIG_FILE") { try configuration.apply(configFile: path) }
    let simulator = try APNsSimulator.start(configuration: configuration)
    logger.info("apns-simulator ready", [
        "production_port": "\(simulator.productionPort)", "sandbox_port": "\(simulator.sandboxPort)",
        "admin_port": simulator.adminPort.map { "\($0)" } ?? "off",
        "certificate_auth": configuration.clientCAFile == nil ? "off" : "on",
    ])
    let signal = await ProcessSignals.waitForTermination()
    logger.info("apns-simulator stopping", ["signal": "\(signal)"])
    await simulator.shutdown()
} catch {
    logger.critical("apns-simulator failed to start: \(error)")
    exit(1)
}
