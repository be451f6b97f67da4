import APNsKeyRegistry
import Foundation
import ProtobufCodec
import ServiceCore

/// `pushctl credentials list|check`: the dispatcher's APNs credentials file (`PUSH_APNS_CREDENTIALS_FILE`
/// or `--file`), read as the dispatcher reads it. Never prints key material: only team and key ids,
/// `.p8` paths, scopes and activation times.
enum CredentialsCommands {
    /// `credentials list`: one line per key: the app entry it serves, `TEAMID/KEYID`, its scopes, when
    /// it activates and whether it is active now; `--json`: one object per line. With `--admin URL` (a
    /// dispatcher's admin port) each line also shows what that dispatcher knows (`GET /v1/credentials`):
    /// the key's state there, its last provider-token mint and APNs's last refusal.
    static func list(_ arguments: CommandLineArguments, _ settings: PushCtlSettings, now: Date = Date()) async throws {
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
        var runtime: [String: RuntimeFacts]?
        if let admin = arguments.value("admin") {
            let (status, body) = try await AdminPortClient.get(admin, path: "/v1/credentials", option: "admin")
            guard status == 200 else { throw PushCtlError(.failed, "\(admin)/v1/credentials answered \(status): \(body)") }
            runtime = try Self.runtimeFacts(body, from: admin)
        }
        for line in lines(registry, now: now, json: arguments.flag("json"), runtime: runtime) { print(line) }
    }

    /// What a dispatcher reports about one key of one app entry (`GET /v1/credentials`).
    struct RuntimeFacts: Equatable {
        var state: String
        var stateDetail: String?
        var lastMintAt: String?
        var lastRefusalAt: String?
        var lastRefusalReason: String?
    }

    /// The key of a (app entry, key) pair in ``runtimeFacts(_:from:)``'s answer.
    static func runtimeKey(bundleID: String, teamID: String, keyID: String) -> String { "\(bundleID) \(teamID)/\(keyID)" }

    /// Reads the dispatcher's `GET /v1/credentials` answer (`CredentialsReport.json`).
    /// - Throws: `PushCtlError` `.failed` naming `admin` when the answer is not that JSON.
    static func runtimeFacts(_ body: String, from admin: String) throws -> [String: RuntimeFacts] {
        func fields(_ value: JSONValue) -> [String: JSONValue] {
            guard case .object(let object) = value else { return [:] }
            return Dictionary(object.members.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
        }
        func text(_ value: JSONValue?) -> String? {
            if case .string(let string)? = value { return string }
            return nil
        }
        guard let parsed = try? JSONValue(parsing: Array(body.utf8)), case .array(let keys)? = fields(parsed)["keys"] else {
            throw PushCtlError(.failed, "\(admin)/v1/credentials: not a credentials report: \(body.prefix(200))")
        }
        var facts: [String: RuntimeFacts] = [:]
        for key in keys.map(fields) {
            guard let bundleID = text(key["bundle_id"]), let teamID = text(key["team_id"]), let keyID = text(key["key_id"]),
                  let state = text(key["state"])
            else { throw PushCtlError(.failed, "\(admin)/v1/credentials: a key without bundle_id, team_id, key_id or state") }
            facts[runtimeKey(bundleID: bundleID, teamID: teamID, keyID: keyID)] = RuntimeFacts(
                state: state, stateDetail: text(key["state_detail"]), lastMintAt: text(key["last_mint_at"]),
                lastRefusalAt: text(key["last_refusal_at"]), lastRefusalReason: text(key["last_refusal_reason"]))
        }
        return facts
    }

    /// The lines `credentials list` prints for `registry` at `now` (tested without I/O), with a
    /// dispatcher's `runtime` facts when `--admin` was given (a key the dispatcher does not hold, such as
    /// one added to the file since its last reload, shows `not loaded`).
    static func lines(_ registry: CredentialsRegistry, now: Date, json: Bool, runtime: [String: RuntimeFacts]? = nil) -> [String] {
        var lines: [String] = []
        for app in registry.apps {
            for key in app.keys {
                let activation = key.activationIsExplicit ? ISO8601DateFormatter().string(from: key.activatesAt) : "on load"
                let state = key.activatesAt <= now ? "active" : "pending"
                let facts = runtime.map { $0[runtimeKey(bundleID: app.pattern, teamID: key.identity.teamID, keyID: key.identity.keyID)] }
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
                    if let facts {
                        for (name, value) in [("dispatcher_state", facts?.state ?? "not loaded"), ("state_detail", facts?.stateDetail),
                                              ("last_mint_at", facts?.lastMintAt), ("last_refusal_at", facts?.lastRefusalAt),
                                              ("last_refusal_reason", facts?.lastRefusalReason)] {
                            writer.writeKey(name)
                            if let value { writer.writeString(value) } else { writer.writeRaw("null") }
                        }
                    }
                    writer.endObject()
                    lines.append(String(decoding: writer.bytes, as: UTF8.self))
                } else {
                    var line = "\(app.pattern)  \(key.identity)  \(key.scopeDescription)  activate_at \(activation)  \(state)  \(key.identity.p8Path)"
                    if let facts {
                        if let facts {
                            line += "  dispatcher: \(facts.state)"
                            line += "  last mint \(facts.lastMintAt ?? "never")"
                            line += "  last refusal " + (facts.lastRefusalAt.map { "\($0) \(facts.lastRefusalReason ?? "")" } ?? "never")
                            if let detail = facts.stateDetail { line += "  (\(detail))" }
                        } else {
                            line += "  dispatcher: not loaded"
                        }
                    }
                    lines.append(line)
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
