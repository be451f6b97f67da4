import APNsKeyRegistry
import Foundation
import ProtobufCodec
import ServiceCore

/// `pushctl credentials list|check`: the dispatcher's APNs credentials file (`PUSH_APNS_CREDENTIALS_FILE`
/// or `--file`), read as the dispatcher reads it. Never prints key material: only team and key ids,
/// `.p8` paths, scopes and activation times.
enum CredentialsCommands {
    /// `credentials list`: one line per key: the app entry it serves, `TEAMID/KEYID`, its scopes, when
    /// it activates and whether it is active now; `--json`: one object per line.
    static func list(_ arguments: CommandLineArguments, _ settings: PushCtlSettings, now: Date = Date()) throws {
        try arguments.expectPositionals(atMost: 0)
        let file = try Self.file(arguments, settings)
        guard let data = FileManager.default.contents(atPath: file) else {
            throw PushCtlError(.failed, "\(file): cannot read the credentials file")
        }
        let registry: CredentialsRegistry
        do {
            registry = try CredentialsRegistry(json: Array(data), file: file, loadedAt: now)
        } catch {
            throw PushCtlError(.failed, error.description)
        }
        for line in lines(registry, now: now, json: arguments.flag("json")) { print(line) }
    }

    /// The lines `credentials list` prints for `registry` at `now` (tested without I/O).
    static func lines(_ registry: CredentialsRegistry, now: Date, json: Bool) -> [String] {
        var lines: [String] = []
        for app in registry.apps {
            for key in app.keys {
                let activation = key.activationIsExplicit ? ISO8601DateFormatter().string(from: key.activatesAt) : "on load"
                let state = key.activatesAt <= now ? "active" : "pending"
                if json {
                    var writer = JSONWriter()
                    writer.beginObject()
                    for (name, value) in [("bundle_id", app.pattern), ("team_id", key.identity.teamID), ("key_id", key.identity.keyID),
                                          ("p8_file", key.identity.p8Path), ("environment", key.environment?.rawValue ?? "any"),
                                          ("topics", key.topics.map { $0.sorted().joined(separator: ",") } ?? "any"),
                                          ("activate_at", activation), ("state", state)] {
                        writer.writeKey(name)
                        writer.writeString(value)
                    }
                    writer.endObject()
                    lines.append(String(decoding: writer.bytes, as: UTF8.self))
                } else {
                    lines.append("\(app.pattern)  \(key.identity)  \(key.scopeDescription)  activate_at \(activation)  \(state)  \(key.identity.p8Path)")
                }
            }
        }
        return lines
    }

    /// `credentials check`: loads the file as the dispatcher's `--check-config` does, every `.p8`
    /// parsed as a P-256 key; prints every problem (file and entry) and fails, or a summary.
    static func check(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) throws {
        try arguments.expectPositionals(atMost: 0)
        let file = try Self.file(arguments, settings)
        do {
            let store = try CredentialsStore(file: file, logger: Logger(label: "pushctl.credentials", logLevel: .error))
            let registry = store.registry
            print("\(file): \(registry.apps.count) app entries, \(Set(registry.keys.map(\.identity)).count) keys loaded")
        } catch {
            throw PushCtlError(.failed, error.description)
        }
    }

    private static func file(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) throws -> String {
        guard let file = arguments.value("file") ?? settings.env.string("PUSH_APNS_CREDENTIALS_FILE") else {
            throw CommandLineArguments.UsageError("give the credentials file with --file or PUSH_APNS_CREDENTIALS_FILE")
        }
        return file
    }
}
