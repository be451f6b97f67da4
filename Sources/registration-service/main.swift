import Foundation
import RegistrationServiceCore

// registration-service: push.v1.TokenRegistry over gRPC (and JSON over HTTP/2) → push.token-events.v1.
// `registration-service --help` lists the settings; `--check-config` checks them (exit 0 or 2) without
// binding or connecting. Settings and start-up: RegistrationProgram; lifecycle: ServiceMain, docs/lifecycle.md.
exit(await RegistrationProgram.main.run())
