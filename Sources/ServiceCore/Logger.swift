import Foundation
import Synchronization

/// A structured logger that writes one logfmt line per record to standard error.
///
/// Shape of a line: `ts=2026-11-30T15:09:02.123Z level=info logger=dispatcher msg="…" key=value…`.
/// Each line is written with a single `write(2)`, so lines from several threads never interleave.
/// Values are quoted when they contain spaces, quotes or `=`; secrets must never be passed as metadata.
public struct Logger: Sendable {
    /// Severity of a record, lowest first.
    public enum Level: Int, Sendable, Comparable, CustomStringConvertible {
        case trace, debug, info, notice, warning, error, critical

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

        public var description: String {
            switch self {
            case .trace: "trace"
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            case .critical: "critical"
            }
        }

        /// Parses `trace`, `debug`, `info`, `notice`, `warning`, `error` or `critical` (any case).
        public init?(name: String) {
            let all: [Level] = [.trace, .debug, .info, .notice, .warning, .error, .critical]
            guard let level = all.first(where: { $0.description == name.lowercased() }) else { return nil }
            self = level
        }
    }

    /// Key-value pairs attached to a record, printed in key order.
    public typealias Metadata = [String: String]

    /// The component name printed as `logger=`.
    public let label: String
    /// Records below this level are dropped.
    public var logLevel: Level
    /// Metadata added to every record of this logger.
    public var metadata: Metadata

    /// Creates a logger.
    /// - Parameters:
    ///   - label: the component name, such as `dispatcher.kafka`.
    ///   - logLevel: the lowest level written; defaults to the `LOG_LEVEL` environment variable, else `info`.
    public init(label: String, logLevel: Level? = nil, metadata: Metadata = [:]) {
        self.label = label
        self.logLevel = logLevel ?? Logger.defaultLevel
        self.metadata = metadata
    }

    private static let defaultLevel: Level = {
        if let name = ProcessInfo.processInfo.environment["LOG_LEVEL"], let level = Level(name: name) { return level }
        return .info
    }()

    /// Returns a copy of this logger with `metadata` added to every record.
    public func with(_ metadata: Metadata) -> Logger {
        var copy = self
        copy.metadata.merge(metadata) { _, new in new }
        return copy
    }

    /// Writes a record at `level` when `level >= logLevel`.
    public func log(_ level: Level, _ message: @autoclosure () -> String, _ metadata: Metadata = [:]) {
        guard level >= logLevel else { return }
        var line = "ts=\(Logger.timestamp()) level=\(level) logger=\(Logger.quote(label)) msg=\(Logger.quote(message()))"
        let merged = self.metadata.merging(metadata) { _, new in new }
        for key in merged.keys.sorted() {
            line += " \(key)=\(Logger.quote(merged[key]!))"
        }
        line += "\n"
        Logger.sink.write(line)
    }

    public func trace(_ message: @autoclosure () -> String, _ metadata: Metadata = [:]) { log(.trace, message(), metadata) }
    public func debug(_ message: @autoclosure () -> String, _ metadata: Metadata = [:]) { log(.debug, message(), metadata) }
    public func info(_ message: @autoclosure () -> String, _ metadata: Metadata = [:]) { log(.info, message(), metadata) }
    public func notice(_ message: @autoclosure () -> String, _ metadata: Metadata = [:]) { log(.notice, message(), metadata) }
    public func warning(_ message: @autoclosure () -> String, _ metadata: Metadata = [:]) { log(.warning, message(), metadata) }
    public func error(_ message: @autoclosure () -> String, _ metadata: Metadata = [:]) { log(.error, message(), metadata) }
    public func critical(_ message: @autoclosure () -> String, _ metadata: Metadata = [:]) { log(.critical, message(), metadata) }

    static func quote(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.contains { $0 == " " || $0 == "\"" || $0 == "=" || $0 == "\n" || $0 == "\\" }
        guard needsQuotes else { return value }
        var out = "\""
        for ch in value {
            switch ch {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.append(ch)
            }
        }
        return out + "\""
    }

    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = time_t(now.tv_sec)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let ms = Int(now.tv_nsec) / 1_000_000
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
            Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
            Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), ms)
    }

    private static let sink = StandardErrorSink()
}

/// Writes whole lines to file descriptor 2.
private final class StandardErrorSink: Sendable {
    func write(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Foundation.write(2, buffer.baseAddress! + offset, buffer.count - offset)
                if written <= 0 { return }
                offset += written
            }
        }
    }
}
