import Foundation
import Synchronization

/// Reads typed settings from environment variables and names the variable when one is wrong.
///
/// Only executables read the environment, through this loader; libraries take configuration structs.
///
/// Every read is recorded (name, effective value, whether it came from the environment or the default)
/// so that `--check-config` can print the effective configuration (`checkReport()`, secrets masked by
/// `EnvironmentConfig.mask`). A loader made with `collectingErrors: true` does not throw at the first
/// bad setting: it records the error, returns the default and carries on, so one run names every bad
/// variable.
public struct EnvironmentConfig: Sendable {
    /// A variable that is missing or cannot be parsed.
    public struct Error: Swift.Error, CustomStringConvertible, Sendable {
        /// The environment variable's name.
        public let variable: String
        /// What is wrong with it.
        public let problem: String
        public var description: String { "environment variable \(variable): \(problem)" }

        /// An error for `variable`, saying what is wrong with it.
        public init(variable: String, problem: String) {
            self.variable = variable
            self.problem = problem
        }
    }

    /// One setting as the program read it.
    public struct Entry: Sendable, Equatable {
        /// Where the effective value came from.
        public enum Source: String, Sendable { case environment, `default`, unset }
        /// The variable's name.
        public var variable: String
        /// The effective value, unmasked (`nil` when unset and without a default).
        public var value: String?
        /// Where `value` came from.
        public var source: Source
    }

    private final class Record: Sendable {
        struct State {
            var entries: [Entry] = []
            var errors: [Error] = []
            var warnings: [Error] = []
        }
        let state = Mutex(State())
    }

    private let values: [String: String]
    private let record = Record()
    /// Whether bad settings are recorded (and their defaults returned) instead of thrown.
    public let collectsErrors: Bool

    /// Creates a loader over `values` (default: this process's environment).
    /// - Parameter collectingErrors: record bad settings instead of throwing (for `--check-config`).
    public init(_ values: [String: String] = ProcessInfo.processInfo.environment, collectingErrors: Bool = false) {
        self.values = values
        self.collectsErrors = collectingErrors
    }

    // MARK: Recording

    private func note(_ name: String, _ value: String?, _ source: Entry.Source) {
        record.state.withLock { state in
            if let index = state.entries.firstIndex(where: { $0.variable == name }) {
                state.entries[index] = Entry(variable: name, value: value, source: source)
            } else {
                state.entries.append(Entry(variable: name, value: value, source: source))
            }
        }
    }

    /// Reports `problem` with `variable`: throws it, or records it when collecting errors (only the
    /// first problem of each variable is kept).
    /// - Throws: `EnvironmentConfig.Error` unless collecting errors.
    public func fail(_ variable: String, _ problem: String) throws {
        let error = Error(variable: variable, problem: problem)
        guard collectsErrors else { throw error }
        record.state.withLock { state in
            if !state.errors.contains(where: { $0.variable == variable }) { state.errors.append(error) }
        }
    }

    /// Records that `variable` is valid but probably not what the operator meant (`--check-config`
    /// prints `warning: VARIABLE: problem`; the executable logs `warnings` at start). Never throws: a
    /// warning does not stop the program. The same warning twice is kept once.
    public func warn(_ variable: String, _ problem: String) {
        let warning = Error(variable: variable, problem: problem)
        record.state.withLock { state in
            if !state.warnings.contains(where: { $0.variable == variable && $0.problem == problem }) { state.warnings.append(warning) }
        }
    }

    /// Runs `body`, which builds something from `variable`'s value; an error it throws becomes a
    /// problem of `variable` (thrown, or recorded when collecting errors, then `nil` is returned).
    /// - Throws: `EnvironmentConfig.Error` naming `variable`, unless collecting errors.
    public func attempt<T>(_ variable: String, _ body: () throws -> T) throws -> T? {
        do {
            return try body()
        } catch let error as Error {
            try fail(error.variable, error.problem)
            return nil
        } catch {
            try fail(variable, "\(error)")
            return nil
        }
    }

    /// Every variable read so far, in the order first read.
    public var entries: [Entry] { record.state.withLock { $0.entries } }
    /// Every problem recorded so far (only when collecting errors).
    public var errors: [Error] { record.state.withLock { $0.errors } }
    /// Every warning recorded so far (`warn(_:_:)`), in order.
    public var warnings: [Error] { record.state.withLock { $0.warnings } }

    // MARK: Typed reads

    /// The raw value of `name`, or `nil` when unset or empty.
    public func string(_ name: String) -> String? {
        guard let value = values[name], !value.isEmpty else {
            record.state.withLock { state in
                if !state.entries.contains(where: { $0.variable == name }) {
                    state.entries.append(Entry(variable: name, value: nil, source: .unset))
                }
            }
            return nil
        }
        note(name, value, .environment)
        return value
    }

    /// The value of `name`, or `defaultValue` when unset.
    public func string(_ name: String, default defaultValue: String) -> String {
        if let value = string(name) { return value }
        note(name, defaultValue, .default)
        return defaultValue
    }

    /// The value of `name`.
    /// - Throws: `EnvironmentConfig.Error` when it is unset or empty (when collecting errors: records
    ///   it and returns "").
    public func required(_ name: String) throws -> String {
        guard let value = string(name) else {
            try fail(name, "is required but not set")
            return ""
        }
        return value
    }

    /// The integer value of `name`, or `defaultValue` when unset.
    /// - Throws: `EnvironmentConfig.Error` when set but not an integer.
    public func int(_ name: String, default defaultValue: Int) throws -> Int {
        guard let raw = string(name) else {
            note(name, String(defaultValue), .default)
            return defaultValue
        }
        guard let value = Int(raw.trimmingCharacters(in: .whitespaces)) else {
            try fail(name, "expected an integer, got \"\(raw)\"")
            return defaultValue
        }
        return value
    }

    /// The integer value of `name` within `range`, or `defaultValue` when unset.
    /// - Throws: `EnvironmentConfig.Error` naming the variable when set but not an integer in `range`.
    public func int(_ name: String, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        let value = try int(name, default: defaultValue)
        guard range.contains(value) else {
            let bound = range.upperBound == Int.max ? "at least \(range.lowerBound)" : "between \(range.lowerBound) and \(range.upperBound)"
            try fail(name, "expected an integer \(bound), got \(value)")
            return defaultValue
        }
        return value
    }

    /// The boolean value of `name` (`true`/`false`/`1`/`0`/`yes`/`no`), or `defaultValue` when unset.
    /// - Throws: `EnvironmentConfig.Error` when set to anything else.
    public func bool(_ name: String, default defaultValue: Bool) throws -> Bool {
        guard let raw = string(name) else {
            note(name, String(defaultValue), .default)
            return defaultValue
        }
        switch raw.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default:
            try fail(name, "expected true or false, got \"\(raw)\"")
            return defaultValue
        }
    }

    /// The longest duration any `*_MS` setting accepts: 365 days (31,536,000,000 ms). Far above any
    /// sensible timeout or interval, and far below where time arithmetic (instants plus durations,
    /// milliseconds times 10^6) could overflow.
    public static let maximumMilliseconds = 31_536_000_000

    /// A duration given in milliseconds by `name`, or `defaultValue` when unset.
    /// - Throws: `EnvironmentConfig.Error` when set but not an integer from 0 to
    ///   `maximumMilliseconds`.
    public func milliseconds(_ name: String, default defaultValue: Duration) throws -> Duration {
        guard let raw = string(name) else {
            note(name, String(defaultValue.wholeMilliseconds), .default)
            return defaultValue
        }
        guard let ms = Int(raw.trimmingCharacters(in: .whitespaces)), ms >= 0, ms <= Self.maximumMilliseconds else {
            try fail(name, "expected milliseconds from 0 to \(Self.maximumMilliseconds) (365 days), got \"\(raw)\"")
            return defaultValue
        }
        return .milliseconds(ms)
    }

    /// One of `choices` (matched exactly) named by `name`'s value, or `defaultValue` when unset.
    /// - Throws: `EnvironmentConfig.Error` listing the choices when set to anything else.
    public func choice<T: Equatable>(_ name: String, default defaultValue: T, _ choices: KeyValuePairs<String, T>) throws -> T {
        guard let raw = string(name) else {
            // The report shows the default by its name among the choices.
            if let key = choices.first(where: { $0.value == defaultValue })?.key { note(name, key, .default) }
            return defaultValue
        }
        guard let match = choices.first(where: { $0.key == raw }) else {
            try fail(name, "expected \(choices.map(\.key).joined(separator: " or ")), got \"\(raw)\"")
            return defaultValue
        }
        return match.value
    }

    /// The contents of the file named by `name` without a trailing newline (for passwords kept in a
    /// file, as Docker and Kubernetes secrets are), or `nil` when `name` is unset.
    /// - Throws: `EnvironmentConfig.Error` when the file cannot be read or is empty.
    public func fileContents(_ name: String) throws -> String? {
        guard let path = string(name) else { return nil }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            try fail(name, "cannot read \(path)")
            return nil
        }
        var trimmed = Substring(text)
        while let last = trimmed.last, last == "\n" || last == "\r" { trimmed = trimmed.dropLast() }
        if trimmed.isEmpty { try fail(name, "\(path) is empty") }
        return String(trimmed)
    }

    /// Variables set in the environment whose names start with `prefix` (for pass-through settings
    /// such as `PUSH_KAFKA_PROPERTY_*`), each recorded as read, sorted by name.
    public func variables(withPrefix prefix: String) -> [(name: String, value: String)] {
        values.keys.filter { $0.hasPrefix(prefix) && $0.count > prefix.count }.sorted().compactMap { name in
            string(name).map { (name, $0) }
        }
    }

    /// `PUSH_*` variables set in the environment but not in `read` (the scripts' own `PUSH_VAR_DIR`,
    /// `PUSH_PG_PORT` and `PUSH_UP_*` excepted), sorted.
    func unreadVariables(read: Set<String>) -> [String] {
        values.keys.filter { name in
            name.hasPrefix("PUSH_") && !read.contains(name) && !name.hasPrefix("PUSH_UP_")
                && name != "PUSH_VAR_DIR" && name != "PUSH_PG_PORT"
        }.sorted()
    }
}
