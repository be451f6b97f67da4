import APNsSimulator
import Foundation
import ServiceCore

// apns-simulator: Apple's APNs provider API for tests, benchmarks and staging systems.
ProcessSignals.ignoreSIGPIPE()
let logger = Logger(label: "apns-simulator")
do {
    let env = EnvironmentConfig()
    var configuration = APNsSimulator.Configuration(
        certificateChainFile: try env.required("PUSH_SIM_TLS_CERT_FILE"),
        privateKeyFile: try env.required("PUSH_SIM_TLS_KEY_FILE"),
        trustedKeys: try APNsSimulator.TrustedKey.parseList(try env.required("PUSH_SIM_KEYS")))
    configuration.host = env.string("PUSH_SIM_HOST", default: "127.0.0.1")
    configuration.productionPort = try env.int("PUSH_SIM_PRODUCTION_PORT", default: 2197)
    configuration.sandboxPort = try env.int("PUSH_SIM_SANDBOX_PORT", default: 2198)
    configuration.adminPort = try env.int("PUSH_SIM_ADMIN_PORT", default: 8081)
    let simulator = try APNsSimulator.start(configuration: configuration)
    logger.info("apns-simulator ready", [
        "production_port": "\(simulator.productionPort)", "sandbox_port": "\(simulator.sandboxPort)",
        "admin_port": simulator.adminPort.map { "\($0)" } ?? "off",
    ])
    let signal = await ProcessSignals.waitForTermination()
    logger.info("apns-simulator stopping", ["signal": "\(signal)"])
    await simulator.shutdown()
} catch {
    logger.critical("apns-simulator failed to start: \(error)")
    exit(1)
}
