import APNsSimulator
import Foundation

// apns-simulator: Apple's APNs provider API for tests, benchmarks and staging systems.
// `apns-simulator --help` lists the settings; `--check-config` checks them (exit 0 or 2) without
// listening. Settings and start-up: APNsSimulatorProgram; lifecycle: ServiceMain.
exit(await APNsSimulatorProgram.main.run())
