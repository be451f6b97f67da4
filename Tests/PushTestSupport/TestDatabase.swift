import Foundation
import Postgres
import ServiceCore
import Synchronization
import Testing

/// Shared by the test targets that need a real PostgreSQL (PostgresTests, DispatcherCoreTests).
///
/// Finds the PostgreSQL server the tests use, starting the dev server when needed:
/// `PUSH_PG_URL` when set; else the dev server's URL (`scripts/postgres-dev url`: the superuser with
/// the server's password file, as loopback needs a password for every role), after running
/// `scripts/postgres-dev start` when nothing answers there.
public enum TestServer {
    public static let adminURL = Task<String, any Error> {
        ProcessSignals.ignoreSIGPIPE()
        if let url = ProcessInfo.processInfo.environment["PUSH_PG_URL"], !url.isEmpty {
            do {
                try await PostgresConnection.connect(url).close()
            } catch {
                throw TestFailure("PUSH_PG_URL=\(url) does not answer: \(error)")
            }
            return url
        }
        let url = try await runScript("url").trimmingCharacters(in: .whitespacesAndNewlines)
        if let connection = try? await PostgresConnection.connect(url + (url.contains("?") ? "&" : "?") + "connect_timeout=3") {
            await connection.close()
            return url
        }
        _ = try await runScript("start")
        try await PostgresConnection.connect(url).close()
        return url
    }

    public static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/postgres-dev").path

    /// Runs `scripts/postgres-dev <command>` and returns its standard output.
    public static func runScript(_ command: String, environment: [String: String] = [:]) async throws -> String {
        guard FileManager.default.isExecutableFile(atPath: script) else { throw TestFailure("\(script) is missing") }
        // Output goes to files, not pipes: a server started by the script could keep a pipe open.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("postgres-dev-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let outURL = directory.appendingPathComponent("stdout"), errURL = directory.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: script)
        process.arguments = [command]
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: outURL)
        process.standardError = try FileHandle(forWritingTo: errURL)
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do { try process.run() } catch { continuation.resume(throwing: error) }
        }
        let out = (try? String(contentsOf: outURL, encoding: .utf8)) ?? ""
        let err = (try? String(contentsOf: errURL, encoding: .utf8)) ?? ""
        guard status == 0 else { throw TestFailure("scripts/postgres-dev \(command) exited \(status): \(err)") }
        return out
    }

    /// `url` with its database replaced by `database` (URL or keyword form).
    public static func url(_ url: String, database: String) -> String {
        if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://"), var components = URLComponents(string: url) {
            components.path = "/" + database
            return components.string ?? url
        }
        return url + " dbname=\(database)"
    }
}

public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The fresh database of the running suite (see `.testDatabase`).
public enum TestDatabase {
    @TaskLocal public static var current: String?

    /// The URL of the suite's database.
    public static var url: String {
        get throws {
            guard let current else { throw TestFailure("the suite lacks the .testDatabase trait") }
            return current
        }
    }

    /// The URL of the suite's database with `application_name` set, to find its sessions in
    /// `pg_stat_activity`.
    public static func url(applicationName: String) throws -> String {
        let base = try url
        if base.hasPrefix("postgres://") || base.hasPrefix("postgresql://") {
            return base + (base.contains("?") ? "&" : "?") + "application_name=\(applicationName)"
        }
        return base + " application_name=\(applicationName)"
    }

    public static func connect(onNotice: (@Sendable (PostgresNotice) -> Void)? = nil) async throws -> PostgresConnection {
        try await PostgresConnection.connect(try url, logger: Logger(label: "postgres.test"), onNotice: onNotice)
    }

    /// Runs `body` on a fresh connection and closes it afterwards.
    public static func withConnection<T>(
        isolation: isolated (any Actor)? = #isolation, _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await connect()
        return try await withAsyncCleanup { try await body(connection) } cleanup: { await connection.close() }
    }
}

/// Creates `test_<random>` on the server for the whole suite and drops it afterwards, so suites
/// run in parallel without seeing each other's tables.
public struct TestDatabaseTrait: SuiteTrait, TestScoping {
    public var isRecursive: Bool { false }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let adminURL = try await TestServer.adminURL.value
        // The name is made of hex digits only: DDL cannot take it as a parameter.
        let name = "test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16)
        let admin = try await PostgresConnection.connect(adminURL)
        try await admin.execute("CREATE DATABASE \(name)")
        do {
            try await TestDatabase.$current.withValue(TestServer.url(adminURL, database: name)) { try await function() }
        } catch {
            _ = try? await admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            await admin.close()
            throw error
        }
        try await admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
        await admin.close()
    }
}

extension Trait where Self == TestDatabaseTrait {
    /// A fresh database for the suite, on the server `TestServer` finds or starts.
    public static var testDatabase: TestDatabaseTrait { TestDatabaseTrait() }
}

/// A value shared by concurrent test tasks.
public final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    public init(_ value: Value) { mutex = Mutex(value) }
    public var value: Value { mutex.withLock { $0 } }
    @discardableResult
    public func update<T: Sendable>(_ body: @Sendable (inout Value) -> T) -> T { mutex.withLock { body(&$0) } }
}
