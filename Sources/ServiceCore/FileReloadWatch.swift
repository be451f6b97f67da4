import Foundation

/// Calls a reload on SIGHUP, and when a file's modification time or size changes: the one watch
/// behind the registration service's API-key file (`PUSH_AUTH_KEYS_FILE`) and the dispatcher's
/// credentials file (`PUSH_APNS_CREDENTIALS_FILE`).
public enum FileReloadWatch {
    /// Runs until cancelled: `reload` on every SIGHUP, and when `file`'s modification time or size
    /// differ from the last check (every `interval`; a file that cannot be read is not a change).
    /// - Parameters:
    ///   - file: the file to watch; nil watches SIGHUP only.
    ///   - interval: how often the file is checked.
    ///   - reload: the reload, which keeps what is in use when the new file is bad.
    public static func run(file: String?, every interval: Duration, reload: @escaping @Sendable () -> Void) async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await _ in ProcessSignals.signals([SIGHUP]) { reload() }
            }
            if let file {
                group.addTask {
                    var last = stamp(file)
                    while !Task.isCancelled {
                        try? await Task.sleep(for: interval)
                        let current = stamp(file)
                        if current != last, current != nil {
                            last = current
                            reload()
                        }
                    }
                }
            }
        }
    }

    /// `<modification date>/<size>` of `file`, or nil when it cannot be read.
    static func stamp(_ file: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: file) else { return nil }
        return "\(attributes[.modificationDate].map { "\($0)" } ?? "")/\(attributes[.size].map { "\($0)" } ?? "")"
    }
}
