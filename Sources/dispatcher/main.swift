import DispatcherCore
import Foundation
import ServiceCore

// dispatcher: token events and send requests from Kafka → PostgreSQL and APNs → feedback.
// `dispatcher --help` lists the settings; `dispatcher --check-config` checks them (exit 0 or 2) without
// connecting anywhere. Settings and start-up: DispatcherProgram; lifecycle: ServiceMain, docs/lifecycle.md.
MallocArenas.limitUnlessConfigured(environment: ProcessInfo.processInfo.environment)
exit(await DispatcherProgram.main.run())
