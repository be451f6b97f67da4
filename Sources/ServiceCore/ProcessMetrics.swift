import Foundation

/// The process metrics every executable exports, read from Linux's `/proc` at scrape time (proc(5)),
/// named as Prometheus's client libraries name them:
///
/// - `process_resident_memory_bytes` (gauge): resident set size, `/proc/self/statm` field 2 × page size.
/// - `process_open_fds` (gauge): entries of `/proc/self/fd`.
/// - `process_start_time_seconds` (gauge): start time since the Unix epoch, in seconds
///   (`/proc/self/stat` field 22, in clock ticks after boot, plus `btime` of `/proc/stat`).
public enum ProcessMetrics {
    /// Registers the three gauges in `registry` (idempotent: a second call returns the same families).
    public static func register(in registry: MetricsRegistry = .shared) {
        registry.gaugeCallback("process_resident_memory_bytes", help: "Resident memory size in bytes.") {
            residentMemoryBytes().map { [MetricSample(value: Double($0))] } ?? []
        }
        registry.gaugeCallback("process_open_fds", help: "Number of open file descriptors.") {
            openFileDescriptors().map { [MetricSample(value: Double($0))] } ?? []
        }
        let start = startTimeSeconds()
        registry.gaugeCallback("process_start_time_seconds", help: "Start time of the process since the Unix epoch in seconds.") {
            start.map { [MetricSample(value: $0)] } ?? []
        }
    }

    /// Resident set size in bytes; nil when `/proc` is not readable.
    public static func residentMemoryBytes() -> Int? {
        guard let text = read("/proc/self/statm") else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count >= 2, let pages = Int(fields[1]) else { return nil }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// Open file descriptors (the directory stream used to count them is left out); nil when
    /// `/proc/self/fd` is not readable.
    public static func openFileDescriptors() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let isDot = withUnsafeBytes(of: entry.pointee.d_name) { $0.first == UInt8(ascii: ".") }
            if !isDot { count += 1 }
        }
        return count - 1  // the descriptor opendir itself holds
    }

    /// Start time since the Unix epoch, in seconds; nil when `/proc` is not readable.
    public static func startTimeSeconds() -> Double? {
        guard let stat = read("/proc/self/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        // Fields after the command name (which may contain spaces) start at field 3.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 19, let ticks = Double(fields[19]) else { return nil }
        guard let boot = read("/proc/stat")?.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
              let btime = Double(boot.dropFirst(6).trimmingCharacters(in: .whitespaces))
        else { return nil }
        return btime + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    private static func read(_ path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
