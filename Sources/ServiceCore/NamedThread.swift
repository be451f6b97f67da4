import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Threads of the project's own (a blocking C call's, an event loop's, an executor's) started with a
/// name the kernel knows, so that `top -H`, `ps -L`, `perf` and a debugger tell them apart.
///
/// Foundation's `Thread.name` set before `start()` does not reach the kernel on Linux: every such
/// thread kept the name of the thread that started it, usually a cooperative-pool thread's (which the
/// kernel shows as `oot.default-qos`), so a profile could not tell a PostgreSQL connection's thread
/// from an HTTP/2 event loop's or a pool thread. The body of a `NamedThread` first names its own
/// thread (`pthread_setname_np` on `pthread_self()`), then runs.
public enum NamedThread {
    /// The longest thread name Linux keeps, in bytes (`TASK_COMM_LEN` 16, less the terminating NUL);
    /// `pthread_setname_np` refuses a longer one (`ERANGE`) and the thread keeps its old name.
    public static let maxKernelNameBytes = 15

    /// Starts a thread named `name` (Foundation's `Thread.name`, and the kernel's `kernelName(name)`)
    /// that runs `body`, and returns it.
    @discardableResult
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) -> Thread {
        let thread = make(name: name, body)
        thread.start()
        return thread
    }

    /// The same thread, not started yet: for an owner that must hold it before it runs.
    public static func make(name: String, _ body: @escaping @Sendable () -> Void) -> Thread {
        let kernel = kernelName(name)
        let thread = Thread {
            nameThisThread(kernel)
            body()
        }
        thread.name = name
        return thread
    }

    /// Names the calling thread in the kernel. `pthread_setname_np` is a GNU extension that the Glibc
    /// module does not export: it is looked up, as `MallocArenas` looks up `mallopt`.
    private static func nameThisThread(_ kernel: String) {
        #if canImport(Glibc)
        typealias SetName = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setname_np") else { return }
        _ = unsafeBitCast(symbol, to: SetName.self)(pthread_self(), kernel)
        #endif
    }

    /// `name` cut to its first `maxKernelNameBytes` bytes of UTF-8, never inside a character.
    public static func kernelName(_ name: String) -> String {
        var bytes = 0
        var kept = ""
        for character in name {
            let size = character.utf8.count
            guard bytes + size <= maxKernelNameBytes else { break }
            bytes += size
            kept.append(character)
        }
        return kept
    }
}
