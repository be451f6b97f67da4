/// Waits until `condition` holds, checking every `interval`, instead of sleeping a guessed time and
/// then asserting.
/// - Parameters:
///   - what: the condition, named in the failure.
///   - timeout: how long to wait at most. Default 30 s.
///   - interval: the pause between checks. Default 20 ms.
///   - state: what the failure adds about the state at the deadline (so that a failure seen once, in
///     a log, says where it stopped). Default: nothing.
/// - Throws: `TestFailure` naming `what` when the deadline passes first; whatever `condition` throws.
public func eventually(
    _ what: String, timeout: Duration = .seconds(30), interval: Duration = .milliseconds(20),
    state: () -> String = { "" }, isolation: isolated (any Actor)? = #isolation, _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while true {
        if try await condition() { return }
        guard ContinuousClock.now < deadline else {
            let detail = state()
            throw TestFailure("timed out after \(timeout) waiting for \(what)\(detail.isEmpty ? "" : " (\(detail))")")
        }
        try await Task.sleep(for: interval)
    }
}
