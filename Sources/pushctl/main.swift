import Foundation
import PushCtlCore
import ServiceCore

// pushctl: the operator's command line (pushctl --help). The commands live in PushCtlCore.
ProcessSignals.ignoreSIGPIPE()
exit(await PushCtl.run(Array(CommandLine.arguments.dropFirst())))
