import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The allocator's settings and trimming. The dispatcher is linked with jemalloc (README
/// "Operations", memory): there `trim()` purges jemalloc's arenas and the arena limit is not glibc's
/// to set. Elsewhere (the other executables, the tests) glibc's malloc serves.
///
/// glibc's malloc gives threads arenas of their own, up to eight per core; memory freed in one
/// arena is kept there for that arena's next allocations. The dispatcher's threads (Kafka's, the
/// HTTP/2 event loops', the PostgreSQL connections', the cooperative pool's) allocate in turn after
/// a large request, so each arena ends up holding its own peak: a 100,000-token request left about
/// 50 MB more resident with the default than with two arenas (README "Operations", memory).
public enum MallocArenas {
    /// The arena count the executables use unless the operator chose one.
    public static let defaultLimit = 2

    /// jemalloc's `mallctl` when jemalloc is this process's allocator, else nil.
    private static var jemallocControl: UnsafeMutableRawPointer? {
        #if canImport(Glibc)
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallctl")
        #else
        nil
        #endif
    }

    /// Limits glibc's malloc to `defaultLimit` arenas, unless `MALLOC_ARENA_MAX` is set in the
    /// environment (glibc reads that itself and it wins) or jemalloc is the allocator. Call it first
    /// in `main`, before any thread starts.
    /// - Returns: the limit applied, or nil when the environment's (or a non-glibc allocator's) applies.
    @discardableResult
    public static func limitUnlessConfigured(environment: [String: String]) -> Int? {
        #if canImport(Glibc)
        guard environment["MALLOC_ARENA_MAX"] == nil, jemallocControl == nil else { return nil }
        // `mallopt` is declared in <malloc.h>, which the Glibc module does not export: look it up.
        // M_ARENA_MAX is -8 in <malloc.h>.
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return nil }
        let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
        return mallopt(-8, Int32(defaultLimit)) == 1 ? defaultLimit : nil
        #else
        return nil
        #endif
    }

    /// Gives free memory at the top of the heap and in the arenas' free lists back to the system
    /// (glibc's `malloc_trim(0)`; with jemalloc, `mallctl("arena.4096.purge")`: every arena's unused
    /// dirty pages, 4096 being `MALLCTL_ARENAS_ALL`). After a large request the freed memory stays resident until then:
    /// the process's RSS keeps the peak of its largest request, and each later peak starts from
    /// there. Blocking (it walks every arena under its lock, milliseconds for a few hundred MB): call
    /// it from a thread of its own, as `startTrimming` does.
    /// - Returns: true when memory was returned (with jemalloc: when the purge succeeded), false when
    ///   there was none (or not on glibc).
    @discardableResult
    public static func trim() -> Bool {
        #if canImport(Glibc)
        if let control = jemallocControl {
            typealias Mallctl = @convention(c) (UnsafePointer<CChar>, UnsafeMutableRawPointer?, UnsafeMutablePointer<Int>?, UnsafeMutableRawPointer?, Int) -> Int32
            return unsafeBitCast(control, to: Mallctl.self)("arena.4096.purge", nil, nil, nil, 0) == 0
        }
        typealias MallocTrim = @convention(c) (Int) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return false }
        return unsafeBitCast(symbol, to: MallocTrim.self)(0) == 1
        #else
        return false
        #endif
    }

    /// Starts a thread that calls `trim()` every `interval` for the rest of the process (a blocking
    /// C call: not on the cooperative pool). `interval` must be positive.
    public static func startTrimming(every interval: Duration) {
        let seconds = max(interval.inSeconds, 0.001)
        NamedThread.start(name: "malloc-trim") {
            while true {
                Thread.sleep(forTimeInterval: seconds)
                trim()
            }
        }
    }
}
