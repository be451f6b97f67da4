import Testing

@testable import PushCtlCore

@Suite struct CommandLineArgumentsTests {
    static let options: [CommandLineArguments.Option] = [
        .value("token", "HEX", "a token", repeatable: true), .value("bundle", "ID", "bundle"), .flag("wait", "wait"),
        .value("timeout", "SECONDS", "timeout"), .value("count", "N", "count"),
    ]

    @Test func valuesFlagsAndPositionals() throws {
        let parsed = try CommandLineArguments(
            ["--token", "aa,bb", "--token=cc", "--bundle", "com.x", "--wait", "pos", "--", "--not-an-option"], options: Self.options)
        #expect(parsed.list("token") == ["aa", "bb", "cc"])
        #expect(parsed.value("bundle") == "com.x")
        #expect(parsed.flag("wait"))
        #expect(!parsed.flag("help"))
        #expect(parsed.positionals == ["pos", "--not-an-option"])
    }

    @Test func usageErrorsNameTheOption() {
        func message(_ arguments: [String]) -> String {
            do {
                _ = try CommandLineArguments(arguments, options: Self.options)
                return ""
            } catch { return error.message }
        }
        #expect(message(["--nope"]) == "unknown option --nope")
        #expect(message(["--bundle"]).contains("--bundle needs a value"))
        #expect(message(["--wait=yes"]).contains("--wait is a flag"))
        #expect(message(["--bundle", "a", "--bundle", "b"]).contains("--bundle given more than once"))
        #expect(message(["-x"]).contains("-x"))
    }

    @Test func typedValues() throws {
        let parsed = try CommandLineArguments(["--timeout", "1.5", "--count", "0"], options: Self.options)
        #expect(try parsed.seconds("timeout", default: .seconds(9)) == .milliseconds(1500))
        #expect(throws: CommandLineArguments.UsageError.self) { try parsed.int("count", default: 1, in: 1...10) }
        #expect(try parsed.int("missing", default: 7) == 7)
        #expect(throws: CommandLineArguments.UsageError.self) { try parsed.required("bundle") }
        let help = try CommandLineArguments(["-h"], options: [])
        #expect(help.wantsHelp)
    }

    @Test func commandsResolveByTheirWordsAndEveryOneHasHelp() throws {
        let (command, rest) = try PushCtlCommand.resolve(["dead-letters", "redrive", "--partition", "0"])
        #expect(command.name == "dead-letters redrive")
        #expect(rest == ["--partition", "0"])
        #expect(try PushCtlCommand.resolve(["token", "show", "abc"]).1 == ["abc"])
        #expect(throws: CommandLineArguments.UsageError.self) { try PushCtlCommand.resolve(["dead-letters", "nope"]) }
        #expect(throws: CommandLineArguments.UsageError.self) { try PushCtlCommand.resolve(["frobnicate"]) }
        for command in PushCtlCommand.all {
            #expect(command.help.contains("usage: pushctl \(command.name)"))
            #expect(command.help.contains("exit status:"))
            #expect(PushCtlCommand.overview.contains(command.name))
            // Every declared option parses.
            for option in command.options {
                _ = try CommandLineArguments(option.takesValue ? ["--\(option.name)", "x"] : ["--\(option.name)"], options: command.options)
            }
        }
    }

    @Test func envFileLines() {
        let pairs = PushCtlSettings.parseEnvFile("# comment\nA=1\n export B = \"two words\"\n\nC='3'\nbroken\n")
        #expect(pairs.map(\.0) == ["A", "B", "C"])
        #expect(pairs.map(\.1) == ["1", "two words", "3"])
    }
}
