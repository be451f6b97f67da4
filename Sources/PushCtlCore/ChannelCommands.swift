import Foundation
import Kafka
import ProtobufCodec
import PushDomain
import PushMessages
import ServiceCore

/// `pushctl channel create|delete|list` (README "Live Activity broadcast channels"): create and delete
/// produce a `ChannelCommand` to the send-requests topic keyed `<bundle_id>/<environment>/<name>`
/// (as `pushctl cancel` produces a `CancelRequest`); the dispatcher answers with a `ChannelEvent` on
/// the feedback topic. `list` reads the dispatcher's admin port (`GET /v1/channels/<bundle id>[/<name>]`).
enum ChannelCommands {
    /// The command a `create` or `delete` line asks for, checked as the dispatcher checks it.
    /// - Throws: `CommandLineArguments.UsageError` naming the bad argument.
    static func command(_ action: ChannelCommand.Action, _ arguments: CommandLineArguments, nowMs: Int64) throws -> ChannelCommand {
        try arguments.expectPositionals(atMost: 2)
        guard arguments.positionals.count == 2 else {
            throw CommandLineArguments.UsageError("BUNDLE_ID and NAME are required: pushctl channel \(action == .create ? "create" : "delete") BUNDLE_ID NAME")
        }
        var command = ChannelCommand()
        command.action = action
        command.bundleID = arguments.positionals[0]
        command.name = arguments.positionals[1]
        command.environment = try arguments.choice("environment", default: .production, ["production": .production, "sandbox": .sandbox])
        command.requestedAtMs = nowMs
        if action == .create {
            command.messageStoragePolicy = try arguments.choice(
                "policy", default: .noMessageStored, ["none": .noMessageStored, "most-recent": .mostRecentMessageStored])
            command.deleteAfterMs = Int64(try arguments.int("delete-after", default: 0, in: 0...315_360_000)) * 1000
        }
        do {
            try DeviceValidator.checkBundleID(command.bundleID, field: "BUNDLE_ID")
            try ChannelCommand.checkName(command.name, field: "NAME")
        } catch {
            throw CommandLineArguments.UsageError(error.description)
        }
        return command
    }

    /// `pushctl channel create|delete`; with `--wait`, follows the feedback topic (joined before
    /// producing) for the command's `ChannelEvent` and prints it.
    /// - Throws: `PushCtlError` (`.failed`) for a FAILED event, (`.unavailable`) when none came within
    ///   `--timeout`; Kafka errors.
    static func produce(_ action: ChannelCommand.Action, _ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        let command = try command(action, arguments, nowMs: Int64(Date().timeIntervalSince1970 * 1000))
        let wait = arguments.flag("wait")
        let timeout = try arguments.seconds("timeout", default: .seconds(120))
        try await KafkaTools.requireTopics(wait ? [settings.sendRequestsTopic, settings.feedbackTopic] : [settings.sendRequestsTopic], arguments, settings)
        if wait { PushCtl.printError("joining the feedback topic \(settings.feedbackTopic) before sending…") }
        let reader = wait ? try await KafkaTools.reader(topic: settings.feedbackTopic, fromBeginning: false, arguments, settings) : nil
        let producer = try KafkaTools.producer(arguments, settings)
        let verb = action == .create ? "create" : "delete"
        do {
            let report = try await producer.send(
                topic: settings.sendRequestsTopic, key: command.recordKey, value: command.serializedBytes(),
                headers: [KafkaHeader(name: "content-type", value: "application/x-protobuf; message=\(ChannelCommand.protoMessageName)")])
            await producer.shutdown()
            let sent = "\(verb) of channel \(command.recordKey) sent (\(report.topic)[\(report.partition)]@\(report.offset))"
            guard reader != nil else {
                print(sent + "; its ChannelEvent comes on \(settings.feedbackTopic); pushctl channel list \(command.bundleID) \(command.name) shows the row")
                return
            }
            PushCtl.printError(sent + "; waiting for its ChannelEvent…")
        } catch {
            await producer.shutdown(timeout: .zero)
            if let reader { await reader.close() }
            throw error
        }
        guard let reader else { return }
        let event = try await withAsyncCleanup {
            try await waitForEvent(of: command, reader: reader, deadline: ContinuousClock.now + timeout)
        } cleanup: {
            await reader.close()
        }
        guard let event else { throw PushCtlError(.unavailable, "no ChannelEvent for \(command.recordKey) within \(timeout)") }
        print(describe(event))
        if event.kind == .failed { throw PushCtlError(.failed, "the \(verb) of \(command.recordKey) failed") }
    }

    /// The first `ChannelEvent` of `command`'s channel on `reader`, or nil when `deadline` passes.
    static func waitForEvent(of command: ChannelCommand, reader: KafkaConsumer, deadline: ContinuousClock.Instant) async throws -> ChannelEvent? {
        while ContinuousClock.now < deadline {
            guard let batch = try await SendCommand.withDeadline(deadline, { await reader.nextMessages(maxCount: 1000) }), !batch.isEmpty else { return nil }
            for message in batch {
                guard let feedback = try? FeedbackEvent(protobufBytes: message.value), case .channelEvent(let event)? = feedback.event,
                      event.bundleID == command.bundleID, event.environment == command.environment, event.name == command.name
                else { continue }
                return event
            }
        }
        return nil
    }

    /// One line for an event: its kind, the key, Apple's id, and the reasons of a FAILED one.
    static func describe(_ event: ChannelEvent) -> String {
        let key = ChannelCommand.recordKey(bundleID: event.bundleID, environment: event.environment, name: event.name)
        var parts = ["\(event.kind.protoName ?? "\(event.kind)") \(key)"]
        if !event.channelID.isEmpty { parts.append("channel_id=\(event.channelID)") }
        if event.deleteAtMs > 0 { parts.append("delete_at_ms=\(event.deleteAtMs)") }
        if event.kind == .failed {
            parts.append("outcome_reason=\(event.outcomeReason.protoName ?? "\(event.outcomeReason)")")
            if !event.apnsReason.isEmpty { parts.append("apns_reason=\(event.apnsReason)") }
            if !event.error.isEmpty { parts.append("error=\(event.error)") }
        }
        return parts.joined(separator: " ")
    }

    /// `pushctl channel list BUNDLE_ID [NAME]`: the dispatcher admin port's JSON, or one line per channel.
    static func list(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 2)
        guard let bundleID = arguments.positionals.first else {
            throw CommandLineArguments.UsageError("BUNDLE_ID is required: pushctl channel list BUNDLE_ID [NAME]")
        }
        let base = arguments.value("dispatcher") ?? settings.env.string("PUSH_DISPATCHER_ADMIN_URL", default: "http://127.0.0.1:9102")
        let path = "/v1/channels/" + ([bundleID] + arguments.positionals.dropFirst()).joined(separator: "/")
        let (status, body) = try await AdminPortClient.get(base, path: path, option: "dispatcher")
        if status == 404 { throw PushCtlError(.notFound, "GET \(path): \(body.trimmingCharacters(in: .whitespacesAndNewlines))") }
        guard status == 200 else { throw PushCtlError(status == 503 ? .unavailable : .failed, "GET \(path): HTTP \(status): \(body)") }
        if arguments.flag("json") {
            print(body.trimmingCharacters(in: .whitespacesAndNewlines))
            return
        }
        print(lines(body))
    }

    /// One line per channel of the endpoint's JSON: name, environment, state, id, policy, delete_at.
    static func lines(_ body: String) -> String {
        guard case .object(let document)? = try? JSONValue(parsing: Array(body.utf8)), case .array(let rows)? = document["channels"] else {
            return body
        }
        var out: [String] = []
        for case .object(let row) in rows {
            func text(_ key: String) -> String {
                switch row[key] {
                case .string(let value)?: value
                case .number(let value)?: value
                default: ""
                }
            }
            let id = text("channel_id")
            out.append([text("name"), text("environment"), text("state"), id.isEmpty ? "-" : id, text("message_storage_policy"),
                        "delete_at_ms=\(text("delete_at_ms"))"].joined(separator: "  "))
        }
        if case .bool(true)? = document["truncated"] { out.append("(the first \(rows.count) channels; the dispatcher lists no more)") }
        return out.joined(separator: "\n")
    }
}
