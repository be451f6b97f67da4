import DispatcherStatus
import Foundation
import Kafka
import Postgres
import PushDomain
import PushMessages
import ServiceCore

/// `pushctl send`: produce a `SendRequest`, optionally wait for its `RequestCompleted`.
enum SendCommand {
    static func run(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        let request = try SendRequestBuilder.build(arguments, now: Int64(Date().timeIntervalSince1970 * 1000))
        let wait = arguments.flag("wait")
        let timeout = try arguments.seconds("timeout", default: .seconds(120))
        let expected = try arguments.value("expect").map { _ in try arguments.int("expect", default: 0, in: 1...Int.max) }
        // The audience from PostgreSQL, when reachable: printed before anything is sent, and an empty
        // one is refused (exit 6) unless --allow-empty, so a mistyped bundle or environment is caught.
        let audience = await audienceSize(request, settings)
        if let audience {
            PushCtl.printError("audience: \(ProgressBar.grouped(audience)) active token\(audience == 1 ? "" : "s") (\(describe(request)))")
        } else if request.hasAudienceOrUsers {
            PushCtl.printError("audience: unknown (PostgreSQL at PUSH_PG_URL not reachable)")
        }
        if request.sendAtMs > 0 {
            PushCtl.printError("scheduled for \(FeedbackLine.timestamp(request.sendAtMs))")
        }
        if arguments.flag("dry-run") {
            print("dry run: request \(request.requestID) not sent; audience \(audience.map { ProgressBar.grouped($0) } ?? "unknown")")
            return
        }
        if audience == 0, !arguments.flag("allow-empty") {
            throw PushCtlError(.emptyAudience, "nothing to send: the audience is empty (\(describe(request))); check --app/--user, --bundle and --app-environment, or pass --allow-empty")
        }
        try await KafkaTools.requireTopics(wait ? [settings.sendRequestsTopic, settings.feedbackTopic] : [settings.sendRequestsTopic], arguments, settings)

        // Subscribe before producing, so that no outcome is missed. Joining a fresh consumer group
        // takes a few seconds: say so.
        if wait { PushCtl.printError("joining the feedback topic \(settings.feedbackTopic) before sending…") }
        let reader = wait ? try await KafkaTools.reader(topic: settings.feedbackTopic, fromBeginning: false, arguments, settings) : nil
        let producer = try KafkaTools.producer(arguments, settings)
        let started = ContinuousClock.now
        do {
            let report = try await producer.send(
                topic: settings.sendRequestsTopic, key: request.requestID, value: request.serializedBytes(),
                headers: [KafkaHeader(name: "content-type", value: SendRequest.protobufContentType)])
            await producer.shutdown()
            if !wait {
                if arguments.flag("json") {
                    print(request.jsonString())
                } else {
                    print("sent request \(request.requestID) (\(report.topic)[\(report.partition)]@\(report.offset))")
                }
                return
            }
            PushCtl.printError("sent request \(request.requestID) (\(report.topic)[\(report.partition)]@\(report.offset)); waiting for its outcome…")
        } catch {
            await producer.shutdown(timeout: .zero)
            if let reader { await reader.close() }
            throw error
        }
        guard let reader else { return }
        let total = try await expectedTotal(request, expected: expected ?? audience, settings)
        let completed = try await waitForCompletion(request.requestID, reader: reader, total: total, started: started, timeout: timeout)
        await reader.close()
        let elapsed = ContinuousClock.now - started
        if arguments.flag("json") {
            print(completed.jsonString())
        } else {
            print(summary(completed, elapsed: elapsed))
        }
        let allDelivered = completed.error.isEmpty && completed.delivered == completed.total && completed.status == .completed
        if !allDelivered {
            throw PushCtlError(.notAllDelivered, completed.error.isEmpty ? "not every notification was delivered" : "request refused: \(completed.error)")
        }
    }

    /// "request R COMPLETED: 10,000 notifications: 10,000 delivered, 0 rejected, 0 failed, 0 skipped in 4.2 s (2,381/s)".
    static func summary(_ completed: RequestCompleted, elapsed: Duration) -> String {
        let seconds = elapsed.inSeconds
        let rate = seconds > 0 ? Int((Double(completed.total) / seconds).rounded()) : 0
        let status = completed.status.protoName.map { String($0.dropFirst("REQUEST_STATUS_".count)) } ?? "?"
        var text = "request \(completed.requestID) \(status): \(ProgressBar.grouped(Int(completed.total))) notifications: "
            + "\(ProgressBar.grouped(Int(completed.delivered))) delivered, \(completed.rejected) rejected, \(completed.failed) failed, "
            + "\(completed.skipped) skipped in \(String(format: "%.1f", seconds)) s (\(ProgressBar.grouped(rate))/s)"
        if !completed.error.isEmpty { text += "; error: \(completed.error)" }
        return text
    }

    /// The audience's size from PostgreSQL for `--app` (the dispatcher's own `AudienceQuery`) and
    /// `--user` (their active tokens of the bundle), or `nil` for explicit tokens or when PostgreSQL
    /// cannot be reached.
    static func audienceSize(_ request: SendRequest, _ settings: PushCtlSettings) async -> Int? {
        switch request.target {
        case .audience:
            guard let query = try? AudienceQuery(request) else { return nil }
            let (sql, parameters) = query.count()
            return try? await TokenCommands.withDatabase(settings) { connection in
                try await connection.query(sql, parameters).first?.int("n") ?? 0
            }
        case .userIDs(let users):
            let bundle = request.notification?.bundleID ?? ""
            return await activeTokenCount(users: users.userIDs, bundleID: bundle, settings)
        default: return nil
        }
    }

    /// The active tokens of `users` (each counted once) under `bundleID` in PostgreSQL; nil when it
    /// cannot be read.
    private static func activeTokenCount(users: [String], bundleID: String, _ settings: PushCtlSettings) async -> Int? {
        try? await TokenCommands.withDatabase(settings) { connection in
            var count = 0
            for user in Set(users) {
                let rows = try await connection.query(
                    "SELECT count(*) AS n FROM device_tokens WHERE user_id = $1 AND bundle_id = $2 AND status = 'active'",
                    [.string(user), .string(bundleID)])
                count += try rows.first?.int("n") ?? 0
            }
            return count
        }
    }

    /// "app com.example.app, both environments" / "2 users of com.example.app".
    static func describe(_ request: SendRequest) -> String {
        let bundle = request.notification?.bundleID ?? ""
        switch request.target {
        case .audience(let audience):
            let environment = audience.environment.apnsEnvironment.map { "\($0.rawValue)" }
                ?? request.notification?.environment.apnsEnvironment.map { "\($0.rawValue)" } ?? "both environments"
            return "app \(audience.bundleID.isEmpty ? bundle : audience.bundleID), \(environment)"
        case .userIDs(let users): return "\(Set(users.userIDs).count) user\(Set(users.userIDs).count == 1 ? "" : "s") of \(bundle)"
        case .channelID(let channel): return "channel \(channel) of \(bundle)"
        default: return bundle
        }
    }

    /// The number of notifications the request will produce, when it can be known: its explicit
    /// tokens, `--expect`, or the users' active tokens of the bundle in PostgreSQL (when reachable).
    private static func expectedTotal(_ request: SendRequest, expected: Int?, _ settings: PushCtlSettings) async throws -> Int? {
        if let expected { return expected }
        switch request.target {
        case .deviceTokens(let tokens): return tokens.deviceTokens.count
        case .channelID: return 1  // one BroadcastReport
        case .userIDs(let users):
            guard settings.env.string("PUSH_PG_URL") != nil else { return nil }
            let bundle = request.notification?.bundleID ?? ""
            return await activeTokenCount(users: users.userIDs, bundleID: bundle, settings)
        default: return nil
        }
    }

    /// Reads feedback until the request's `RequestCompleted`, drawing the progress bar from its
    /// delivery reports.
    private static func waitForCompletion(
        _ requestID: String, reader: KafkaConsumer, total: Int?, started: ContinuousClock.Instant, timeout: Duration
    ) async throws -> RequestCompleted {
        let bar = ProgressBar()
        var counts: [DeliveryOutcome: Int] = [:]
        var reports = 0
        var lastDrawn = ContinuousClock.now - .seconds(1)
        let deadline = started + timeout
        let interactive = isatty(2) != 0
        func draw(force: Bool = false) {
            let total = total ?? (force ? reports : nil)
            let now = ContinuousClock.now
            guard force || now - lastDrawn >= (interactive ? .milliseconds(100) : .seconds(1)) else { return }
            lastDrawn = now
            let details = "delivered \(counts[.delivered, default: 0]) rejected \(counts[.rejected, default: 0]) failed \(counts[.failed, default: 0]) skipped \(counts[.skipped, default: 0])"
            let line = bar.render(done: reports, total: total, elapsed: now - started, details: details)
            if interactive { PushCtl.printProgress(line) } else { PushCtl.printError(line) }
        }
        while ContinuousClock.now < deadline {
            let batch = try await withDeadline(deadline) { await reader.nextMessages(maxCount: 1000) }
            guard let batch else { break }
            if batch.isEmpty { break }  // the reader closed
            for message in batch {
                guard let event = try? FeedbackEvent(protobufBytes: message.value) else { continue }
                switch event.event {
                case .deliveryReport(let report) where report.requestID == requestID:
                    reports += 1
                    counts[report.outcome, default: 0] += 1
                case .broadcastReport(let report) where report.requestID == requestID:
                    reports += 1
                    counts[report.outcome, default: 0] += 1
                    let apple = report.apnsReason.isEmpty ? "" : " \(report.apnsReason)"
                    let reason = report.outcomeReason == .unspecified ? "" : " (\(report.outcomeReason.protoName ?? ""))"
                    PushCtl.printError("broadcast to \(report.channelID): \(report.outcome.protoName ?? "")\(apple)\(reason)"
                        + (report.apnsUniqueID.isEmpty ? "" : ", apns-unique-id \(report.apnsUniqueID)"))
                case .requestCompleted(let completed) where completed.requestID == requestID:
                    // Reports of other partitions may still be on their way: the completion's counts are final.
                    reports = Int(completed.total)
                    counts = [.delivered: Int(completed.delivered), .rejected: Int(completed.rejected),
                              .failed: Int(completed.failed), .skipped: Int(completed.skipped)]
                    draw(force: true)
                    if interactive { PushCtl.endProgress() }
                    return completed
                default:
                    break
                }
            }
            draw()
        }
        if interactive { PushCtl.endProgress() }
        throw PushCtlError(.unavailable, "no RequestCompleted for \(requestID) within \(timeout) (\(reports) delivery reports seen)")
    }

    /// `body`'s result, or `nil` when `deadline` passes first (the body is then cancelled).
    static func withDeadline<T: Sendable>(_ deadline: ContinuousClock.Instant, _ body: @escaping @Sendable () async -> T) async throws -> T? {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { await body() }
            group.addTask {
                try await Task.sleep(until: deadline, clock: .continuous)
                return nil
            }
            let first = try await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }
}

extension SendRequest {
    /// Whether the target is an app audience or users (whose size only PostgreSQL knows).
    var hasAudienceOrUsers: Bool {
        switch target {
        case .audience, .userIDs: true
        default: false
        }
    }
}
