import ServiceCore

/// Runs `service` while `body` runs, then shuts it down gracefully and waits for it to return.
/// - Returns: what `body` returned.
/// - Throws: what `body` threw (the service is still shut down and waited for), else what the
///   service threw.
@discardableResult
public func whileRunning<S: Service, R>(_ service: S, _ body: () async throws -> R) async throws -> R {
    let shutdown = GracefulShutdown()
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await service.run(shutdown: shutdown) }
        do {
            let result = try await body()
            shutdown.trigger()
            try await group.waitForAll()
            return result
        } catch {
            shutdown.trigger()
            try? await group.waitForAll()
            throw error
        }
    }
}
