import APNsKeyRegistry
import ServiceCore

/// Re-reads the credentials file on SIGHUP and when it changes (`FileReloadWatch`, checked every
/// `interval`) until asked to stop; a file that does not load leaves the registry in use. With the
/// single-key shorthand (no file) it only waits to be stopped: a service of the group that returns
/// early would stop the whole dispatcher.
struct CredentialsReloadService: Service {
    let store: CredentialsStore
    let interval: Duration

    func run(shutdown: GracefulShutdown) async {
        guard let file = store.file else {
            await shutdown.wait()
            return
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await FileReloadWatch.run(file: file, every: interval) { store.reload() } }
            await shutdown.wait()
            group.cancelAll()
        }
    }
}
