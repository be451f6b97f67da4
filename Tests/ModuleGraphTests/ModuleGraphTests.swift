import Foundation
import Testing

/// The allowed import graph of docs/modules.md against what the modules import and what Package.swift
/// lets them depend on. Reads files only.
@Suite struct ModuleGraphTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// docs/modules.md's table: module → the project modules it may import.
    static func allowedGraph() throws -> [String: Set<String>] {
        let text = try String(contentsOf: root.appendingPathComponent("docs/modules.md"), encoding: .utf8)
        var graph: [String: Set<String>] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 4 else { continue }
            let module = cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            let allowed = cells[3].split(separator: ",").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " `")) }
            graph[module] = Set(allowed.filter { $0 != "—" && !$0.isEmpty })
        }
        return graph
    }

    /// The modules under Sources/: each directory is one.
    static func sourceModules() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Sources").path).filter { !$0.hasPrefix(".") }.sorted()
    }

    /// The modules `module`'s Swift files import (any `import`, `@testable import`, `internal import`, …).
    static func imports(of module: String) throws -> [String: [String]] {
        let directory = root.appendingPathComponent("Sources/\(module)")
        var found: [String: [String]] = [:]
        guard let files = FileManager.default.enumerator(atPath: directory.path) else { return [:] }
        for case let file as String in files where file.hasSuffix(".swift") {
            let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            for line in text.split(separator: "\n") {
                let words = line.split(separator: " ")
                guard let index = words.firstIndex(of: "import"), index + 1 < words.count,
                      words[..<index].allSatisfy({ $0.hasPrefix("@") || ["internal", "public", "package", "private", "fileprivate"].contains($0) })
                else { continue }
                found[String(words[index + 1]).components(separatedBy: ".")[0], default: []].append(file)
            }
        }
        return found
    }

    /// Package.swift's targets under Sources/ and their dependencies (string literals in `dependencies: [...]`).
    static func packageDependencies() throws -> [String: Set<String>] {
        let text = try String(contentsOf: root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let target = try Regex(#"\.(?:target|executableTarget|systemLibrary)\(\s*name:\s*"([^"]+)"(?:,\s*dependencies:\s*\[([^\]]*)\])?"#)
        var result: [String: Set<String>] = [:]
        for match in text.matches(of: target) {
            guard let name = match.output[1].substring.map(String.init) else { continue }
            let list = match.output[2].substring.map(String.init) ?? ""
            result[name] = Set(list.matches(of: /"([^"]+)"/).map { String($0.output.1) })
        }
        return result
    }

    @Test func everyModuleHasARowSayingItsJob() throws {
        let graph = try Self.allowedGraph()
        let missing = try Self.sourceModules().filter { graph[$0] == nil }
        #expect(missing.isEmpty, "modules under Sources/ without a row in docs/modules.md: \(missing)")
        let stale = graph.keys.filter { !FileManager.default.fileExists(atPath: Self.root.appendingPathComponent("Sources/\($0)").path) }
        #expect(stale.isEmpty, "rows in docs/modules.md for modules that do not exist: \(stale.sorted())")
    }

    @Test func modulesImportOnlyWhatTheGraphAllows() throws {
        let graph = try Self.allowedGraph()
        let project = Set(try Self.sourceModules())
        var offenders: [String] = []
        for module in project.sorted() {
            for (imported, files) in try Self.imports(of: module).sorted(by: { $0.key < $1.key })
            where project.contains(imported) && imported != module && !(graph[module] ?? []).contains(imported) {
                offenders.append("\(module) imports \(imported) (\(files.sorted().joined(separator: ", ")))")
            }
        }
        #expect(offenders.isEmpty, "imports docs/modules.md does not allow:\n\(offenders.joined(separator: "\n"))")
    }

    @Test func packageDependenciesStayInsideTheGraph() throws {
        let graph = try Self.allowedGraph()
        let dependencies = try Self.packageDependencies()
        var offenders: [String] = []
        for module in try Self.sourceModules() {
            guard let declared = dependencies[module] else {
                offenders.append("\(module): no target in Package.swift")
                continue
            }
            let extra = declared.subtracting(graph[module] ?? [])
            if !extra.isEmpty { offenders.append("\(module) depends on \(extra.sorted()) in Package.swift") }
        }
        #expect(offenders.isEmpty, "Package.swift dependencies docs/modules.md does not allow:\n\(offenders.joined(separator: "\n"))")
    }

    /// The graph has no cycle (SwiftPM refuses one, but the table should not describe one either).
    @Test func theGraphIsACycleFreeLayering() throws {
        let graph = try Self.allowedGraph()
        var state: [String: Int] = [:]  // 1: on the path, 2: done
        func visit(_ module: String, _ path: [String]) -> [String]? {
            if state[module] == 2 { return nil }
            if state[module] == 1 { return path + [module] }
            state[module] = 1
            for next in (graph[module] ?? []).sorted() { if let cycle = visit(next, path + [module]) { return cycle } }
            state[module] = 2
            return nil
        }
        for module in graph.keys.sorted() { #expect(visit(module, []) == nil, "a cycle through \(module)") }
    }
}
