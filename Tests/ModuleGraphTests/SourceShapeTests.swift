import Foundation
import Testing

/// Guard rails on the shape of the sources, read from disk like `ModuleGraphTests`:
///
/// - in the busiest modules, `Sources/DispatcherCore` and `Sources/ServiceCore`, no file over 400 lines
///   and no function or initializer over 80 lines (from its `func`/`init` line to its closing brace);
/// - in every module under `Sources/`, no unstructured task (`Task {`, `Task(`, `Task.detached`):
///   long-lived work is a `Service`'s `run()`, concurrent work a task group's `group.addTask`.
///
/// What breaks a rule today is listed in `knownExceptions`, each with why; the list only shrinks: an entry
/// that no longer matches anything fails `noExceptionIsStale`, so it is removed as soon as the code is fixed,
/// and an exception allows exactly what it names (one more function, line or task fails).
///
/// The scan is textual, not a parser. Its limits: string literals (`"…"`, `#"…"#`, `"""` blocks) and `//`
/// and `/* */` comments are skipped line by line; a function's length is counted from the line holding its
/// `func`/`init` keyword to the line of the brace that closes its body, found by counting `{` and `}`;
/// closures stored in properties, computed properties, subscripts and `deinit` are not functions here;
/// a declaration without a body (a protocol requirement) is skipped when no `{` follows before a blank line,
/// a `}` or a new declaration.
@Suite struct SourceShapeTests {
    /// The modules held to every rule; every other module under `Sources/` is held to `unstructuredTask`.
    static let modules = ["DispatcherCore", "ServiceCore"]
    static let maximumFileLines = 400
    static let maximumFunctionLines = 80

    /// What breaks a rule on main today, keyed by `Module/File.swift` (files, tasks) or
    /// `Module/File.swift func name` (functions; every overload of the name in the file), with how much:
    /// the file's lines, the function's lines (its longest overload) or the number of unstructured tasks.
    /// The values are ceilings: a file or function that grows past its number fails, so do more tasks.
    /// Nothing in `DispatcherCore` or `ServiceCore` since the dispatcher's restructuring (issue 26); the
    /// unstructured tasks listed are in modules outside them. An entry added here needs the reason beside it.
    static let knownExceptions: [Rule: [String: Int]] = [
        .fileLength: [:],
        .functionLength: [:],
        .unstructuredTask: [
            // The APNs pool's connection slots, health checks, pings, event watch, graceful closes of
            // replaced connections and the deadlines of requests waiting for a stream: the pool is
            // started and stopped by calls, not run as a service (it is to become one, its tasks
            // children of its run()).
            "APNs/Client/APNsConnectionPool.swift": 10,
        ],
    ]

    enum Rule: String, Hashable, CaseIterable, Sendable { case fileLength, functionLength, unstructuredTask }

    /// One rule broken: where (the exception key) and by how much.
    struct Violation: Hashable, CustomStringConvertible {
        var rule: Rule
        var key: String
        var amount: Int
        var description: String { "\(rule.rawValue): \(key) (\(amount))" }
    }

    // MARK: The scan

    /// A source file reduced to code: strings' and comments' contents blanked (a string becomes `""`), one
    /// entry per line.
    static func codeLines(_ text: String) -> [String] {
        var result: [String] = []
        var inBlockString = false
        var inBlockComment = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let characters = Array(line)
            func has(_ prefix: String, at index: Int) -> Bool {
                var position = index
                for character in prefix {
                    guard position < characters.count, characters[position] == character else { return false }
                    position += 1
                }
                return true
            }
            func end(of marker: String, from index: Int) -> Int? {
                var position = index
                while position < characters.count {
                    if has(marker, at: position) { return position + marker.count }
                    position += 1
                }
                return nil
            }
            var code = ""
            var index = 0
            if inBlockString {
                guard let close = end(of: "\"\"\"", from: 0) else { result.append(""); continue }
                inBlockString = false
                index = close
            }
            while index < characters.count {
                if inBlockComment {
                    guard let close = end(of: "*/", from: index) else { break }
                    inBlockComment = false
                    index = close
                    continue
                }
                if has("//", at: index) { break }
                if has("/*", at: index) { inBlockComment = true; index += 2; continue }
                if has("\"\"\"", at: index) || has("#\"\"\"", at: index) {
                    code += "\"\""
                    let opener = characters[index] == "#" ? 4 : 3
                    guard let close = end(of: "\"\"\"", from: index + opener) else { inBlockString = true; break }
                    index = close  // opened and closed on one line
                    continue
                }
                if characters[index] == "\"" || has("#\"", at: index) {
                    let raw = characters[index] == "#"
                    index += raw ? 2 : 1
                    while index < characters.count {
                        if !raw, characters[index] == "\\" { index += 2; continue }
                        if raw ? has("\"#", at: index) : characters[index] == "\"" {
                            index += raw ? 2 : 1
                            break
                        }
                        index += 1
                    }
                    code += "\"\""
                    continue
                }
                code.append(characters[index])
                index += 1
            }
            result.append(code)
        }
        return result
    }

    /// `func name` / `init` declarations: the name and the 0-based line of the keyword.
    static func declarationPattern() -> Regex<AnyRegexOutput> {
        try! Regex(#"^\s*(?:@[A-Za-z]+(?:\([^)]*\))?\s+)*(?:(?:public|private|fileprivate|internal|package|open|static|class|final|override|mutating|nonmutating|nonisolated|convenience|required|dynamic|optional|isolated|consuming|borrowing)(?:\([a-z]+\))?\s+)*(?:func\s+([^\s(<]+)|(init)[?!]?\s*[(<])"#)
    }

    /// Every function of `text` with its length in lines (keyword line to closing-brace line).
    static func functions(_ text: String) -> [(name: String, line: Int, length: Int)] {
        let lines = codeLines(text)
        let declaration = declarationPattern()
        var found: [(name: String, line: Int, length: Int)] = []
        for (start, line) in lines.enumerated() {
            guard line.contains("func") || line.contains("init"), let match = line.firstMatch(of: declaration) else { continue }
            let name = match.output[1].substring.map(String.init) ?? "init"
            var depth = 0
            var opened = false
            var end: Int?
            scan: for index in start..<lines.count {
                let text = index == start ? String(line[match.range.upperBound...]) : lines[index]
                if !opened, index > start {
                    let trimmed = text.trimmingCharacters(in: .whitespaces)
                    if trimmed.isEmpty || trimmed.hasPrefix("}") { break }
                    if text.contains("func") || text.contains("init"), text.firstMatch(of: declaration) != nil { break }
                }
                for character in text {
                    if character == "{" { depth += 1; opened = true }
                    if character == "}" {
                        depth -= 1
                        if opened, depth == 0 { end = index; break scan }
                        if depth < 0 { break scan }
                    }
                }
            }
            if let end { found.append((name, start + 1, end - start + 1)) }
        }
        return found
    }

    /// Lines that start an unstructured task.
    static func unstructuredTaskPattern() -> Regex<AnyRegexOutput> {
        try! Regex(#"(?:^|[^A-Za-z0-9_.])Task\s*(?:\{|\(|\.detached)"#)
    }

    static func violations(file key: String, text: String) -> [Violation] {
        var result: [Violation] = []
        let lineCount = text.hasSuffix("\n") ? text.split(separator: "\n", omittingEmptySubsequences: false).count - 1
            : text.split(separator: "\n", omittingEmptySubsequences: false).count
        if lineCount > maximumFileLines { result.append(Violation(rule: .fileLength, key: key, amount: lineCount)) }
        var longest: [String: Int] = [:]
        for function in functions(text) where function.length > maximumFunctionLines {
            longest["\(key) func \(function.name)"] = max(longest["\(key) func \(function.name)"] ?? 0, function.length)
        }
        result += longest.map { Violation(rule: .functionLength, key: $0.key, amount: $0.value) }
        let task = unstructuredTaskPattern()
        let tasks = codeLines(text).reduce(0) { $0 + ($1.contains("Task") ? $1.matches(of: task).count : 0) }
        if tasks > 0 { result.append(Violation(rule: .unstructuredTask, key: key, amount: tasks)) }
        return result
    }

    static func sourceViolations() throws -> [Violation] {
        var result: [Violation] = []
        let sources = ModuleGraphTests.root.appendingPathComponent("Sources")
        for module in try FileManager.default.contentsOfDirectory(atPath: sources.path).sorted() {
            let directory = sources.appendingPathComponent(module)
            let files = try #require(FileManager.default.enumerator(atPath: directory.path))
            for case let file as String in files where file.hasSuffix(".swift") {
                let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
                let found = violations(file: "\(module)/\(file)", text: text)
                result += modules.contains(module) ? found : found.filter { $0.rule == .unstructuredTask }
            }
        }
        return result.sorted { $0.description < $1.description }
    }

    // MARK: The rules on the sources

    @Test func theSourcesKeepTheirShape() throws {
        let broken = try Self.sourceViolations().filter { violation in
            guard let allowed = Self.knownExceptions[violation.rule]?[violation.key] else { return true }
            return violation.amount > allowed
        }
        #expect(broken.isEmpty, """
            files over \(Self.maximumFileLines) lines, functions over \(Self.maximumFunctionLines) lines or unstructured tasks \
            (Task {, Task(, Task.detached; use a Service or a task group) beyond SourceShapeTests.knownExceptions:
            \(broken.map(\.description).joined(separator: "\n"))
            """)
    }

    @Test func noExceptionIsStale() throws {
        let found = Dictionary(try Self.sourceViolations().map { ("\($0.rule.rawValue) \($0.key)", $0.amount) }, uniquingKeysWith: max)
        var stale: [String] = []
        for (rule, entries) in Self.knownExceptions {
            for (key, allowed) in entries.sorted(by: { $0.key < $1.key }) {
                guard let amount = found["\(rule.rawValue) \(key)"] else {
                    stale.append("\(rule.rawValue): \(key) no longer breaks the rule: remove the entry")
                    continue
                }
                if amount < allowed { stale.append("\(rule.rawValue): \(key) is down to \(amount): lower the entry from \(allowed)") }
            }
        }
        #expect(stale.isEmpty, "SourceShapeTests.knownExceptions:\n\(stale.sorted().joined(separator: "\n"))")
    }

    // MARK: The scan on known text

    @Test func theScanFindsEachKindOfViolation() {
        let body = (1...80).map { "        x += \($0)" }.joined(separator: "\n")
        let text = """
            struct S {
                func short() { let brace = "}{"; _ = brace }
                public static func long(_ a: Int) -> Int {
                    var x = a  // {
            \(body)
                    return x
                }
                init(value: Int) {
                    /* { */ let s = #"}"#
                    _ = s
                }
                func work() async {
                    await withTaskGroup(of: Void.self) { group in group.addTask {} }
                    let t = Task { }
                    _ = Task(priority: .low) { }
                    _ = Task.detached { }
                    _ = t; try? await Task.sleep(for: .seconds(1))
                }
            }

            """
        let functions = Self.functions(text)
        #expect(functions.map(\.name) == ["short", "long", "init", "work"])
        #expect(functions.map(\.length) == [1, 84, 4, 7])
        let violations = Self.violations(file: "M/S.swift", text: text)
        #expect(violations.contains(Violation(rule: .functionLength, key: "M/S.swift func long", amount: 84)))
        #expect(violations.contains(Violation(rule: .unstructuredTask, key: "M/S.swift", amount: 3)))
        #expect(!violations.contains { $0.rule == .fileLength })
        let long = Self.violations(file: "M/L.swift", text: String(repeating: "let x = 1\n", count: 401))
        #expect(long == [Violation(rule: .fileLength, key: "M/L.swift", amount: 401)])
    }

    @Test func stringsAndCommentsAreNotCode() {
        let lines = Self.codeLines("""
            let a = "{ \\" }" // }
            let sql = \"\"\"
                SELECT '{' FROM t
                \"\"\"
            let b = 1 /* Task { */
            """)
        #expect(lines == [#"let a = "" "#, #"let sql = """#, "", "", "let b = 1 "])
    }
}
