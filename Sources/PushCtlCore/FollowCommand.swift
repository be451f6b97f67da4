import Foundation
import Kafka
import PushMessages

/// `pushctl follow`: feedback events as readable lines or proto3 JSON.
enum FollowCommand {
    static func run(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 0)
        let limit = try arguments.value("count").map { _ in try arguments.int("count", default: 1, in: 1...Int.max) }
        let timeout = try arguments.value("timeout").map { _ in try arguments.seconds("timeout", default: .seconds(1)) }
        let request = arguments.value("request")
        // --timeout counts from the start: joining the topic (a few seconds) is part of it.
        let deadline = timeout.map { ContinuousClock.now + $0 } ?? ContinuousClock.now + .seconds(365 * 86_400)
        try await KafkaTools.requireTopics([settings.feedbackTopic], arguments, settings)
        PushCtl.printError("joining \(settings.feedbackTopic)…")
        let joining = min(.seconds(30), deadline - ContinuousClock.now)
        guard joining > .zero else { return }
        let reader: KafkaConsumer
        do {
            reader = try await KafkaTools.reader(
                topic: settings.feedbackTopic, fromBeginning: arguments.flag("from-beginning"), arguments, settings, timeout: joining)
        } catch let error as PushCtlError where timeout != nil && ContinuousClock.now >= deadline {
            PushCtl.printError("pushctl: --timeout ended while joining: \(error.message)")
            return
        }
        PushCtl.printError("following \(settings.feedbackTopic)…")
        var printed = 0
        reading: while true {
            guard let batch = try await SendCommand.withDeadline(deadline, { await reader.nextMessages(maxCount: 500) }), !batch.isEmpty else { break }
            for message in batch {
                guard let event = try? FeedbackEvent(protobufBytes: message.value) else {
                    PushCtl.printError("unreadable record at \(message.topic)[\(message.partition)]@\(message.offset)")
                    continue
                }
                if let request, FeedbackLine.requestID(of: event) != request { continue }
                // Unbuffered, so that a pipe sees each event as it comes.
                FileHandle.standardOutput.write(Data(((arguments.flag("json") ? event.jsonString() : FeedbackLine.render(event)) + "\n").utf8))
                printed += 1
                if let limit, printed >= limit { break reading }
            }
        }
        await reader.close()
    }
}

/// The readable one-line form of a feedback event.
public enum FeedbackLine {
    /// The request an event belongs to (empty for a token invalidation).
    public static func requestID(of event: FeedbackEvent) -> String {
        switch event.event {
        case .deliveryReport(let report): report.requestID
        case .requestCompleted(let completed): completed.requestID
        case .campaignProgress(let progress): progress.requestID
        default: ""
        }
    }

    /// `2026-12-01T06:00:00.123Z DELIVERED request=R token=abcd…1234 apns_id=… attempts=1`, and so on.
    public static func render(_ event: FeedbackEvent) -> String {
        let time = timestamp(event.eventTimeMs)
        switch event.event {
        case .deliveryReport(let report):
            var parts = [time, name(report.outcome.protoName, dropping: ""), "request=\(report.requestID)", "token=\(short(report.deviceToken))"]
            if report.httpStatus != 0 { parts.append("status=\(report.httpStatus)") }
            if !report.apnsReason.isEmpty { parts.append("apns_reason=\(report.apnsReason)") }
            if report.outcomeReason != .unspecified { parts.append("reason=\(name(report.outcomeReason.protoName, dropping: "OUTCOME_REASON_"))") }
            if !report.apnsID.isEmpty { parts.append("apns_id=\(report.apnsID)") }
            parts.append("attempts=\(report.attempts)")
            return parts.joined(separator: " ")
        case .tokenInvalidated(let invalidated):
            var parts = [time, "TOKEN_INVALIDATED", "token=\(short(invalidated.deviceToken))", "bundle=\(invalidated.bundleID)"]
            if !invalidated.apnsReason.isEmpty { parts.append("apns_reason=\(invalidated.apnsReason)") }
            return parts.joined(separator: " ")
        case .requestCompleted(let completed):
            var parts = [
                time, "REQUEST_\(name(completed.status.protoName, dropping: "REQUEST_STATUS_"))", "request=\(completed.requestID)",
                "total=\(completed.total)", "delivered=\(completed.delivered)", "rejected=\(completed.rejected)",
                "failed=\(completed.failed)", "skipped=\(completed.skipped)",
            ]
            if !completed.error.isEmpty { parts.append("error=\"\(completed.error)\"") }
            return parts.joined(separator: " ")
        case .campaignProgress(let progress):
            return [
                time, progress.done ? "CAMPAIGN_DONE" : "CAMPAIGN_PROGRESS", "request=\(progress.requestID)", "bundle=\(progress.bundleID)",
                "processed=\(progress.processed)", "delivered=\(progress.delivered)", "rejected=\(progress.rejected)",
                "failed=\(progress.failed)", "skipped=\(progress.skipped)",
            ].joined(separator: " ")
        default:
            return "\(time) \(event.jsonString())"
        }
    }

    private static func name(_ protoName: String?, dropping prefix: String) -> String {
        guard let protoName else { return "UNKNOWN" }
        return protoName.hasPrefix(prefix) ? String(protoName.dropFirst(prefix.count)) : protoName
    }

    /// The first 8 and last 4 hex digits of a token.
    static func short(_ token: String) -> String {
        token.count > 16 ? "\(token.prefix(8))…\(token.suffix(4))" : token
    }

    /// ISO 8601 UTC with milliseconds.
    static func timestamp(_ ms: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}
