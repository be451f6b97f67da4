import Foundation

/// Runs an outside program (`/usr/bin/env` resolves it on PATH) to completion without blocking the
/// cooperative pool: the wait happens in `terminationHandler`. Standard output and error go to one
/// temporary file, so large output can never stall the program on a full pipe.
/// - Parameters:
///   - arguments: the program and its arguments.
///   - environment: variables added to this process's environment.
///   - directory: the working directory, or this process's.
/// - Returns: the exit status and the combined output.
/// - Throws: when the program cannot be started.
public func runProgram(
    _ arguments: [String], environment: [String: String] = [:], directory: URL? = nil
) async throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    if let directory { process.currentDirectoryURL = directory }
    let log = FileManager.default.temporaryDirectory.appendingPathComponent("program-\(UUID().uuidString).log")
    _ = FileManager.default.createFile(atPath: log.path, contents: nil)
    let handle = try FileHandle(forWritingTo: log)
    process.standardOutput = handle
    process.standardError = handle
    let status: Int32 = try await withCheckedThrowingContinuation { continuation in
        process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
        do { try process.run() } catch { continuation.resume(throwing: error) }
    }
    try? handle.close()
    let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
    try? FileManager.default.removeItem(at: log)
    return (status, output)
}
