import Foundation

/// Reads typed settings from environment variables and names the variable when one is wrong.
///
/// Only executables read the environment, through this loader; libraries take configuration structs.
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

    private let values: [String: String]

    /// Creates a loader over `values` (default: this process's environment).
    public init(_ values: [String: String] = ProcessInfo.processInfo.environment) {
        self.values = values
    }

    /// The raw value of `name`, or `nil` when unset or empty.
    public func string(_ name: String) -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    /// The value of `name`, or `defaultValue` when unset.
    public func string(_ name: String, default defaultValue: String) -> String {
        string(name) ?? defaultValue
    }

    /// The value of `name`.
    /// - Throws: `EnvironmentConfig.Error` when it is unset or empty.
    public func required(_ name: String) throws -> String {
        guard let value = string(name) else { throw Error(variable: name, problem: "is required but not set") }
        return value
    }

    /// The integer value of `name`, or `defaultValue` when unset.
    /// - Throws: `EnvironmentConfig.Error` when set but not an integer.
    public func int(_ name: String, default defaultValue: Int) throws -> Int {
        guard let raw = string(name) else { return defaultValue }
        guard let value = Int(raw.trimmingCharacters(in: .whitespaces)) else {
            throw Error(variable: name, problem: "expected an integer, got \"\(raw)\"")
        }
        return value
    }

    /// The integer value of `name` within `range`, or `defaultValue` when unset.
    /// - Throws: `EnvironmentConfig.Error` naming the variable when set but not an integer in `range`.
    public func int(_ name: String, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        let value = try int(name, default: defaultValue)
        guard range.contains(value) else {
            let bound = range.upperBound == Int.max ? "at least \(range.lowerBound)" : "between \(range.lowerBound) and \(range.upperBound)"
            throw Error(variable: name, problem: "expected an integer \(bound), got \(value)")
        }
        return value
    }

    /// The boolean value of `name` (`true`/`false`/`1`/`0`/`yes`/`no`), or `defaultValue` when unset.
    /// - Throws: `EnvironmentConfig.Error` when set to anything else.
    public func bool(_ name: String, default defaultValue: Bool) throws -> Bool {
        guard let raw = string(name) else { return defaultValue }
        switch raw.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw Error(variable: name, problem: "expected true or false, got \"\(raw)\"")
        }
    }

    /// A duration given in milliseconds by `name`, or `defaultValue` when unset.
    /// - Throws: `EnvironmentConfig.Error` when set but not a non-negative integer.
    public func milliseconds(_ name: String, default defaultValue: Duration) throws -> Duration {
        guard string(name) != nil else { return defaultValue }
        let ms = try int(name, default: 0)
        guard ms >= 0 else { throw Error(variable: name, problem: "expected milliseconds >= 0, got \(ms)") }
        return .milliseconds(ms)
    }
}
