import Foundation
import ProtobufCodec
import Synchronization

/// A structured logger that writes one line per record to standard error, as logfmt (the default)
/// or as one JSON object per line (`LOG_FORMAT=json`).
///
/// logfmt: `ts=2026-11-30T15:09:02.123Z level=info logger=dispatcher msg="…" key=value…`; values are
/// quoted when they contain spaces, quotes or `=`.
/// JSON: `{"ts":"2026-11-30T15:09:02.123Z","level":"info","logger":"dispatcher","msg":"…","key":"value"}`;
/// every value is a JSON string, metadata keys in sorted order.
/// Each line is written with a single `write(2)`, so lines from several threads never interleave.
///
/// Secrets must never be passed as metadata. As a last defence, a message or value that contains a
/// PEM block (`-----BEGIN`) or a JWT-shaped run (`eyJ…` with two dots) is replaced by `[redacted]`.
/// Device tokens are logged shortened, through `Logger.shortened(token:)`.
public struct Logger: Sendable {
    /// How records are written.
    public enum Format: String, Sendable {
        /// `key=value` pairs (logfmt).
        case logfmt
        /// One JSON object per line.
        case json

        /// Parses `logfmt` or `json` (any case).
        public init?(name: String) { self.init(rawValue: name.lowercased()) }
    }

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
    /// The line format; defaults to the `LOG_FORMAT` environment variable (`logfmt` or `json`), else logfmt.
    public var format: Format

    /// Creates a logger.
    /// - Parameters:
    ///   - label: the component name, such as `dispatcher.kafka`.
    ///   - logLevel: the lowest level written; defaults to the `LOG_LEVEL` environment variable, else `info`.
    ///   - format: the line format; defaults to the `LOG_FORMAT` environment variable, else logfmt.
    public init(label: String, logLevel: Level? = nil, metadata: Metadata = [:], format: Format? = nil) {
        self.label = label
        self.logLevel = logLevel ?? Logger.defaultLevel
        self.metadata = metadata
        self.format = format ?? Logger.defaultFormat
    }

    private static let defaultFormat: Format = {
        if let name = ProcessInfo.processInfo.environment["LOG_FORMAT"], let format = Format(name: name) { return format }
        return .logfmt
    }()

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
        Logger.sink.write(line(level, message(), metadata, timestamp: Logger.timestamp()))
    }

    /// The line `log` writes for a record (with its trailing newline), in this logger's format.
    /// - Parameters:
    ///   - level: the record's level.
    ///   - message: the message.
    ///   - metadata: the record's metadata, merged over the logger's.
    ///   - timestamp: the `ts` field (RFC 3339, UTC, milliseconds).
    public func line(_ level: Level, _ message: String, _ metadata: Metadata = [:], timestamp: String) -> String {
        let merged = self.metadata.merging(metadata) { _, new in new }
        let keys = merged.keys.sorted()
        switch format {
        case .logfmt:
            var line = "ts=\(timestamp) level=\(level) logger=\(Logger.quote(label)) msg=\(Logger.quote(Logger.scrubbed(message)))"
            for key in keys {
                line += " \(key)=\(Logger.quote(Logger.scrubbed(merged[key]!)))"
            }
            return line + "\n"
        case .json:
            var line = "{\"ts\":\(Logger.jsonString(timestamp)),\"level\":\"\(level)\",\"logger\":\(Logger.jsonString(label))"
            line += ",\"msg\":\(Logger.jsonString(Logger.scrubbed(message)))"
            for key in keys where !["ts", "level", "logger", "msg"].contains(key) {
                line += ",\(Logger.jsonString(key)):\(Logger.jsonString(Logger.scrubbed(merged[key]!)))"
            }
            return line + "}\n"
        }
    }

    /// A device token shortened for logs: its first 8 and last 4 characters around `...`
    /// (`a1b2c3d4...9f0e`). Short values (16 characters or fewer) become `...` with their length,
    /// so that no whole token is ever logged. Every log line that names a device token uses this.
    public static func shortened(token: String) -> String {
        guard token.count > 16 else { return "...(\(token.count))" }
        return "\(token.prefix(8))...\(token.suffix(4))"
    }

    /// `value`, or `[redacted]` when it contains a PEM block or something shaped like a JWT
    /// (three base64url parts, the first starting with `eyJ`, i.e. `{"`). Cheap for ordinary values:
    /// two substring searches.
    static func scrubbed(_ value: String) -> String {
        if value.contains("-----BEGIN") { return "[redacted]" }
        guard let start = value.range(of: "eyJ") else { return value }
        var dots = 0
        for ch in value[start.lowerBound...] {
            if ch == "." {
                dots += 1
                if dots == 2 { return "[redacted]" }
            } else if !(ch.isASCII && (ch.isLetter || ch.isNumber || ch == "-" || ch == "_")) {
                break
            }
        }
        return value
    }

    /// `value` as a JSON string literal (RFC 8259 §7): quotes, backslashes and control characters escaped.
    static func jsonString(_ value: String) -> String { JSONValue.quote(value) }

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
