import Foundation
import ProtobufCodec
import PushMessages

/// Builds the `SendRequest` of `pushctl send` from its options (no I/O except reading
/// `--payload-file`).
public enum SendRequestBuilder {
    /// The request `arguments` describe.
    /// - Parameters:
    ///   - arguments: the parsed options of `send`.
    ///   - now: ms since epoch for `created_at_ms`.
    ///   - readFile: reads `--payload-file` (a path, or `-` for standard input).
    /// - Throws: `CommandLineArguments.UsageError` naming the option: no target or more than one kind of
    ///   target, no payload or more than one, a payload that is not JSON, an unknown push type or
    ///   environment, a bad priority or expiration.
    public static func build(
        _ arguments: CommandLineArguments, now: Int64, readFile: (String) throws -> String = defaultReadFile
    ) throws(CommandLineArguments.UsageError) -> SendRequest {
        try arguments.expectPositionals(atMost: 0)
        let tokens = arguments.list("token"), users = arguments.list("user"), app = arguments.value("app"), channel = arguments.value("channel")
        let kinds = [!tokens.isEmpty, !users.isEmpty, app != nil, channel != nil].filter { $0 }.count
        guard kinds == 1 else {
            throw .init(kinds == 0 ? "a target is required: --token, --user, --app or --channel"
                : "give one kind of target: --token, --user, --app or --channel")
        }
        var request = SendRequest()
        request.requestID = arguments.value("request-id") ?? UUID().uuidString.lowercased()
        request.createdAtMs = now
        if let sendAt = arguments.value("send-at") { request.sendAtMs = try Self.sendAt(sendAt, now: now) }
        if !tokens.isEmpty {
            var target = DeviceTokens()
            target.deviceTokens = tokens
            request.target = .deviceTokens(target)
        } else if !users.isEmpty {
            var target = UserIds()
            target.userIDs = users
            request.target = .userIDs(target)
        } else if let app {
            var target = AppAudience()
            target.bundleID = app
            // Unspecified reaches both environments (the contract's AppAudience.environment), as a
            // registration's default (sandbox) and a release build's (production) both belong to the app.
            target.environment = try arguments.choice("app-environment", default: .unspecified, ["sandbox": .sandbox, "production": .production])
            request.target = .audience(target)
        } else if let channel {
            // A Live Activity broadcast (docs/live-activities.md): Apple's apns-channel-id.
            guard !channel.isEmpty else { throw .init("option --channel: expected Apple's channel id (base64), got an empty value") }
            request.target = .channelID(channel)
        }

        var notification = Notification()
        notification.bundleID = try arguments.required("bundle")
        let typeName = arguments.value("push-type") ?? (channel != nil ? "liveactivity" : "alert")
        guard let pushType = PushType.allCases.first(where: { $0 != .unspecified && $0.protoName == "PUSH_TYPE_" + typeName.uppercased() }) else {
            let names = PushType.allCases.compactMap { $0.protoName }.filter { $0 != "PUSH_TYPE_UNSPECIFIED" }
                .map { $0.dropFirst("PUSH_TYPE_".count).lowercased() }
            throw .init("option --push-type: expected \(names.joined(separator: ", ")), got \"\(typeName)\"")
        }
        notification.pushType = pushType
        if arguments.value("environment") != nil {
            notification.environment = try arguments.choice("environment", default: .unspecified, ["sandbox": .sandbox, "production": .production])
        }
        if arguments.value("priority") != nil {
            let priority = try arguments.int("priority", default: 10)
            guard [1, 5, 10].contains(priority) else { throw .init("option --priority: expected 10, 5 or 1 (apns-priority), got \(priority)") }
            notification.priority = UInt32(priority)
        }
        if arguments.value("expiration") != nil {
            notification.expiration = Int64(try arguments.int("expiration", default: 0, in: 0...Int.max))
        }
        notification.collapseID = arguments.value("collapse-id") ?? ""
        notification.payload = try payload(arguments, readFile: readFile)
        request.notification = notification
        return request
    }

    /// `--send-at`: an RFC 3339 time (`2026-12-03T09:00:00Z`, `2026-12-03T10:00:00+01:00`, fractions
    /// allowed), ms since the epoch (13 digits or more), or `+SECONDS` from `now`.
    /// - Returns: ms since the epoch.
    /// - Throws: `CommandLineArguments.UsageError` naming the option and the accepted forms.
    public static func sendAt(_ text: String, now: Int64) throws(CommandLineArguments.UsageError) -> Int64 {
        if text.hasPrefix("+"), let seconds = Double(text.dropFirst()), seconds >= 0, seconds.isFinite {
            return now + Int64((seconds * 1000).rounded())
        }
        if text.count >= 13, text.allSatisfy(\.isNumber), let ms = Int64(text) { return ms }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return Int64((date.timeIntervalSince1970 * 1000).rounded()) }
        formatter.formatOptions = [.withInternetDateTime]
        if let date = formatter.date(from: text) { return Int64((date.timeIntervalSince1970 * 1000).rounded()) }
        throw .init("option --send-at: expected an RFC 3339 time (2026-12-03T09:00:00Z), ms since the epoch or +SECONDS, got \"\(text)\"")
    }

    /// The payload: `--payload`, `--payload-file`, or an alert built from `--title`/`--body`.
    static func payload(_ arguments: CommandLineArguments, readFile: (String) throws -> String) throws(CommandLineArguments.UsageError) -> String {
        let given = [arguments.value("payload") != nil, arguments.value("payload-file") != nil,
                     arguments.value("title") != nil || arguments.value("body") != nil].filter { $0 }.count
        guard given == 1 else {
            throw .init(given == 0 ? "a payload is required: --payload, --payload-file, or --title/--body" : "give one payload: --payload, --payload-file, or --title/--body")
        }
        let text: String
        let source: String
        if let inline = arguments.value("payload") {
            text = inline
            source = "--payload"
        } else if let path = arguments.value("payload-file") {
            do { text = try readFile(path) } catch { throw .init("option --payload-file: cannot read \(path): \(error)") }
            source = "--payload-file"
        } else {
            var writer = JSONWriter()
            writer.beginObject()
            writer.writeKey("aps")
            writer.beginObject()
            writer.writeKey("alert")
            writer.beginObject()
            if let title = arguments.value("title") {
                writer.writeKey("title")
                writer.writeString(title)
            }
            if let body = arguments.value("body") {
                writer.writeKey("body")
                writer.writeString(body)
            }
            writer.endObject()
            writer.endObject()
            writer.endObject()
            return String(decoding: writer.bytes, as: UTF8.self)
        }
        let parsed: JSONValue
        do {
            parsed = try JSONValue(parsing: Array(text.utf8))
        } catch {
            throw .init("option \(source): the payload is not JSON: \(error)")
        }
        guard case .object = parsed else { throw .init("option \(source): the payload must be a JSON object, got \(parsed.kindDescription)") }
        return text
    }

    /// Reads a file, or standard input for `-`.
    public static func defaultReadFile(_ path: String) throws -> String {
        if path == "-" { return String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self) }
        return try String(contentsOfFile: path, encoding: .utf8)
    }
}
