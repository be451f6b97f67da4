/// Runs `body`, then awaits `cleanup` whether `body` returned or threw: the `defer` an async close
/// needs (a `defer` cannot await, and a task started in one is not awaited by anyone).
/// - Returns: what `body` returned.
/// - Throws: what `body` threw, after `cleanup` ran.
public func withAsyncCleanup<T>(
    isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T, cleanup: () async -> Void
) async rethrows -> T {
    let value: T
    do {
        value = try await body()
    } catch {
        await cleanup()
        throw error
    }
    await cleanup()
    return value
}
