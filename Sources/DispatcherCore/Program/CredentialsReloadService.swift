import APNs
import APNsKeyRegistry
import ServiceCore

/// Re-reads the credentials file on SIGHUP and when it changes (`FileReloadWatch`, checked every
/// `interval`) until asked to stop; a file that does not load leaves the registry in use. The
/// connection pools of a key the file no longer holds are drained (`drain`, `APNsClient.drain(_:)`):
/// the sends already on them finish, then their connections close with GOAWAY. With the single-key
/// shorthand (no file) it only waits to be stopped: a service of the group that returns early would
/// stop the whole dispatcher.
struct CredentialsReloadService: Service {
    let store: CredentialsStore
    let interval: Duration
    /// Closes a removed key's pools gracefully; returns when they are closed.
    let drain: @Sendable (APNsCredentials) async -> Void

    func run(shutdown: GracefulShutdown) async {
        guard let file = store.file else {
            await shutdown.wait()
            return
        }
        let (removed, removals) = AsyncStream.makeStream(of: APNsCredentials.self)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await FileReloadWatch.run(file: file, every: interval) {
                    store.reload { for credentials in $0 { removals.yield(credentials) } }
                }
            }
            group.addTask {
                // One drain per removed key, side by side: a key with long retries does not hold up the next.
                await withTaskGroup(of: Void.self) { drains in
                    for await credentials in removed { drains.addTask { await drain(credentials) } }
                }
            }
            await shutdown.wait()
            removals.finish()
            // Stopped after the dispatcher (reverse start order): nothing sends any more, so a drain
            // still waiting closes its pools at once.
            group.cancelAll()
        }
    }
}
