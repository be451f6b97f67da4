import Foundation

extension SocketOps {
    /// Raises this process's soft `RLIMIT_NOFILE` toward `count` descriptors, up to the hard limit, so
    /// that a server allowed `maxConnections` connections can hold them (a listener out of descriptors
    /// pauses accepting instead). Never lowers it.
    static func raiseFileLimit(toAtLeast count: Int) {
        var limit = rlimit()
        guard getrlimit(RLIMIT_NOFILE_VALUE, &limit) == 0 else { return }
        let wanted = rlim_t(clamping: count)
        guard limit.rlim_cur < wanted else { return }
        limit.rlim_cur = min(wanted, limit.rlim_max)
        _ = setrlimit(RLIMIT_NOFILE_VALUE, &limit)
    }
}

#if canImport(Glibc)
private let RLIMIT_NOFILE_VALUE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
#else
private let RLIMIT_NOFILE_VALUE = RLIMIT_NOFILE
#endif
