/// The arguments of one `pushctl` command, parsed against the options the command declares.
///
/// Grammar: `--name value`, `--name=value`, `--flag`; `--` ends the options; anything else is a
/// positional argument. An option may be repeated when declared `repeatable` (its values are kept in
/// order). Unknown options, a missing value, a value given to a flag, and repeated single options are
/// usage errors that name the option.
public struct CommandLineArguments: Sendable, Equatable {
    /// One option a command accepts.
    public struct Option: Sendable, Equatable {
        /// The name without dashes (`api-key`).
        public var name: String
        /// Whether it takes a value (`--topic NAME`) or is a flag (`--json`).
        public var takesValue: Bool
        /// Whether it may be given more than once.
        public var repeatable: Bool
        /// What the value is (`NAME`, `FILE`), for `--help`.
        public var valueName: String
        /// One line for `--help`.
        public var help: String

        /// An option that takes a value.
        public static func value(_ name: String, _ valueName: String, _ help: String, repeatable: Bool = false) -> Option {
            Option(name: name, takesValue: true, repeatable: repeatable, valueName: valueName, help: help)
        }

        /// A flag.
        public static func flag(_ name: String, _ help: String) -> Option {
            Option(name: name, takesValue: false, repeatable: false, valueName: "", help: help)
        }
    }

    /// A usage error: what is wrong, naming the argument.
    public struct UsageError: Error, Sendable, Equatable, CustomStringConvertible {
        /// The explanation.
        public var message: String
        /// - Parameter message: the explanation.
        public init(_ message: String) { self.message = message }
        public var description: String { message }
    }

    /// Values of options that take one, by name, in the order given.
    public private(set) var values: [String: [String]] = [:]
    /// Flags that were given.
    public private(set) var flags: Set<String> = []
    /// Positional arguments in order.
    public private(set) var positionals: [String] = []

    /// Parses `arguments` (without the program and command names) against `options`. `--help` and
    /// `-h` are always accepted as the flag `help`.
    /// - Throws: `UsageError` naming the unknown option, the option without its value, the flag given
    ///   a value, or the option given twice.
    public init(_ arguments: [String], options: [Option]) throws(UsageError) {
        let byName = Dictionary(options.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var index = 0
        var optionsEnded = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if optionsEnded || !argument.hasPrefix("-") || argument == "-" {
                positionals.append(argument)
                continue
            }
            if argument == "--" {
                optionsEnded = true
                continue
            }
            if argument == "-h" || argument == "--help" {
                flags.insert("help")
                continue
            }
            guard argument.hasPrefix("--") else { throw UsageError("unknown option \(argument) (options are spelt --name)") }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            guard let option = byName[name] else { throw UsageError("unknown option --\(name)") }
            if option.takesValue {
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else {
                    guard index < arguments.count else { throw UsageError("option --\(name) needs a value (\(option.valueName))") }
                    value = arguments[index]
                    index += 1
                }
                if !option.repeatable, values[name] != nil { throw UsageError("option --\(name) given more than once") }
                values[name, default: []].append(value)
            } else {
                if inlineValue != nil { throw UsageError("option --\(name) is a flag and takes no value") }
                flags.insert(name)
            }
        }
    }

    /// Whether `--help` was given.
    public var wantsHelp: Bool { flags.contains("help") }

    /// Whether the flag `name` was given.
    public func flag(_ name: String) -> Bool { flags.contains(name) }

    /// The value of option `name`, or `nil`.
    public func value(_ name: String) -> String? { values[name]?.last }

    /// Every value of a repeatable option `name`, each also split at commas (`--token a,b --token c`).
    public func list(_ name: String) -> [String] {
        (values[name] ?? []).flatMap { $0.split(separator: ",").map(String.init) }.filter { !$0.isEmpty }
    }

    /// The value of option `name`.
    /// - Throws: `UsageError` naming it when absent.
    public func required(_ name: String) throws(UsageError) -> String {
        guard let value = value(name) else { throw UsageError("option --\(name) is required") }
        return value
    }

    /// The integer value of option `name` within `range`, or `defaultValue` when absent.
    /// - Throws: `UsageError` naming it when not an integer in `range`.
    public func int(_ name: String, default defaultValue: Int, in range: ClosedRange<Int> = Int.min...Int.max) throws(UsageError) -> Int {
        guard let raw = value(name) else { return defaultValue }
        guard let number = Int(raw), range.contains(number) else {
            let bound = range.upperBound == Int.max ? "an integer of at least \(range.lowerBound)" : "an integer between \(range.lowerBound) and \(range.upperBound)"
            throw UsageError("option --\(name): expected \(bound), got \"\(raw)\"")
        }
        return number
    }

    /// A duration given in seconds (`30`, `1.5`) by option `name`, or `defaultValue` when absent.
    /// - Throws: `UsageError` naming it when not a positive number.
    public func seconds(_ name: String, default defaultValue: Duration) throws(UsageError) -> Duration {
        guard let raw = value(name) else { return defaultValue }
        guard let number = Double(raw), number > 0, number.isFinite else {
            throw UsageError("option --\(name): expected seconds (a positive number), got \"\(raw)\"")
        }
        return .milliseconds(Int64(number * 1000))
    }

    /// One of `choices` given by option `name`, or `defaultValue` when absent.
    /// - Throws: `UsageError` listing the choices.
    public func choice<T>(_ name: String, default defaultValue: T, _ choices: KeyValuePairs<String, T>) throws(UsageError) -> T {
        guard let raw = value(name) else { return defaultValue }
        guard let match = choices.first(where: { $0.key == raw.lowercased() || $0.key == raw }) else {
            throw UsageError("option --\(name): expected \(choices.map(\.key).joined(separator: ", ")), got \"\(raw)\"")
        }
        return match.value
    }

    /// Fails when more than `count` positional arguments were given.
    /// - Throws: `UsageError` naming the first extra argument.
    public func expectPositionals(atMost count: Int) throws(UsageError) {
        if positionals.count > count { throw UsageError("unexpected argument \"\(positionals[count])\"") }
    }
}
