import Foundation

extension EnvironmentConfig {
    /// Whether `variable` holds a secret whose value `--check-config` must not print: names containing
    /// `PASSWORD`, `SECRET` or `API_KEY`, and `PUSH_APNS_KEY` (the `.p8` text). Variables naming a
    /// file (`…_FILE`) are paths, not secrets.
    public static func isSecret(_ variable: String) -> Bool {
        let name = variable.uppercased()
        if name.hasSuffix("_FILE") || name.hasSuffix("_LOCATION") { return false }
        return name.contains("PASSWORD") || name.contains("SECRET") || name.contains("API_KEY") || name == "PUSH_APNS_KEY"
            || name.hasSuffix("_KEY_PEM")
    }

    /// `value` as `--check-config` prints it: `********` for a secret variable, and a URL's password
    /// (`postgresql://user:pw@host/db`, or a `password=` parameter) replaced by `********`.
    public static func mask(_ variable: String, _ value: String) -> String {
        if isSecret(variable) { return "********" }
        var masked = value
        // scheme://user:password@host → scheme://user:********@host
        if let scheme = masked.range(of: "://"), let at = masked[scheme.upperBound...].firstIndex(of: "@") {
            let userinfo = masked[scheme.upperBound..<at]
            if let colon = userinfo.firstIndex(of: ":") {
                masked.replaceSubrange(masked.index(after: colon)..<at, with: "********")
            }
        }
        // password=… in a query string or a keyword/value connection string
        if let range = masked.range(of: "password=", options: .caseInsensitive) {
            let end = masked[range.upperBound...].firstIndex { $0 == "&" || $0 == " " } ?? masked.endIndex
            masked.replaceSubrange(range.upperBound..<end, with: "********")
        }
        return masked
    }

    /// The effective configuration as `--check-config` prints it: one line per variable read
    /// (`NAME=value`, masked, with `(default)` or `(unset)`), a warning for each `PUSH_*` variable
    /// that is set but was never read (a misspelt name) and each one recorded with `warn(_:_:)`, then
    /// one `error:` line per bad setting.
    /// - Parameter program: the executable's name, for the heading.
    public func checkReport(program: String) -> String {
        var lines = ["\(program): effective configuration"]
        let entries = self.entries
        let width = min(48, entries.map(\.variable.count).max() ?? 0)
        for entry in entries {
            let name = entry.variable.padding(toLength: max(width, entry.variable.count), withPad: " ", startingAt: 0)
            switch entry.source {
            case .environment: lines.append("  \(name) = \(Self.mask(entry.variable, entry.value ?? ""))")
            case .default: lines.append("  \(name) = \(Self.mask(entry.variable, entry.value ?? ""))  (default)")
            case .unset: lines.append("  \(name)   (unset)")
            }
        }
        let read = Set(entries.map(\.variable))
        for name in unreadVariables(read: read) {
            lines.append("warning: \(name) is set but \(program) does not read it")
        }
        for warning in warnings { lines.append("warning: \(warning.variable): \(warning.problem)") }
        let errors = self.errors
        for error in errors { lines.append("error: \(error.variable): \(error.problem)") }
        lines.append(errors.isEmpty ? "configuration OK" : "configuration invalid: \(errors.count) bad setting\(errors.count == 1 ? "" : "s")")
        return lines.joined(separator: "\n")
    }

    /// The exit status of `--check-config`: 0 when every setting is valid, 2 otherwise.
    public var checkExitStatus: Int32 { errors.isEmpty ? 0 : 2 }

    /// Whether this process was started with `--check-config` (validate, print the effective
    /// configuration, exit 0 or 2 without starting).
    public static var checkRequested: Bool { CommandLine.arguments.dropFirst().contains("--check-config") }
}
