import APNs
import DispatcherStatus
import PushDomain
import PushMessages
import ServiceCore

// MARK: Broadcasts (docs/live-activities.md "Never broadcast twice")

extension SendRequestProcessor {
    /// The `send_log.device_token` of a broadcast to `channelID`: `channel:` + the channel id.
    static func broadcastKey(_ channelID: String) -> String { "channel:" + channelID }

    /// The immediate-request source for a `channel_id` target: one broadcast, at most once.
    ///
    /// A row in `send_log` keyed (request id, `channel:` + channel id) decides: found with an outcome,
    /// its `BroadcastReport` is published again (same event id) and nothing is sent; found `PENDING`
    /// (the process stopped between the Apple request and its answer), it becomes `FAILED` with
    /// `OUTCOME_REASON_UNCONFIRMED` and is never sent. Otherwise ``BroadcastAdmission`` decides; a
    /// refusal is recorded and reported `REJECTED` without an Apple request; an admitted broadcast
    /// writes its intent row (`PENDING`) before the request and its outcome after Apple's answer.
    /// Then one `BroadcastReport` (keyed by request id) and a `RequestCompleted` (total 1). A request
    /// cancelled before it was sent is `SKIPPED` with `OUTCOME_REASON_CANCELLED`.
    /// - Throws: `PostgresError`, `KafkaError` (the caller retries the whole request, which finds the
    ///   row), `CancellationError` (the intent row stays `PENDING`: the broadcast may have left).
    func processBroadcast(_ request: SendRequest, channelID: String, notification: Notification, consumedAtMs: Int64,
                          firstHandling: Bool = false) async throws -> RecordOutcome {
        let logger = logger.with(["request_id": request.requestID, "channel_id": channelID])
        // A first handling (`process`'s `firstHandling`) cannot have completed before.
        if !firstHandling, try await completedLoader.submit(request.requestID) {
            logger.info("request already completed: not handled again", [:])
            return .finished
        }
        let environment = notification.environment.apnsEnvironment ?? defaultEnvironment
        let key = Self.broadcastKey(channelID)
        let requestedAt = request.createdAtMs > 0 ? request.createdAtMs : consumedAtMs
        var report = BroadcastReport()
        report.eventID = FeedbackEventID.broadcastReport(requestID: request.requestID, channelID: channelID)
        report.requestID = request.requestID
        report.channelID = channelID
        report.bundleID = notification.bundleID
        report.environment = Environment(environment)
        report.requestedAtMs = requestedAt

        if let found = try await store.broadcastRow(requestID: request.requestID, key: key) {
            return try await republishBroadcast(found, request: request, key: key, requestedAt: requestedAt, logger: logger)
        }

        if cancellations.contains(request.requestID) {
            // Cancelled before it was sent (CancelCheckPolicy's rule for every source): SKIPPED.
            report.outcome = .skipped
            report.outcomeReason = .cancelled
            return try await settleUnsent(report, outcome: "SKIPPED", request: request, key: key, requestedAt: requestedAt, logger: logger)
        }
        var options = APNsSendOptions()
        var credentialRefusal: String?
        switch credentials?.choose(bundleID: notification.bundleID, environment: environment) {
        case .refused(let reason)?: credentialRefusal = reason
        case .send(let chosen, _)?: options.credentials = chosen
        case nil: break
        }
        let channel = try await channelForBroadcast(bundleID: notification.bundleID, environment: environment, channelID: channelID)
        if case .active(_, let name) = channel { report.channelName = name }
        let apnsRequest: APNsBroadcastRequest
        switch BroadcastAdmission.decide(channelID: channelID, notification: notification, credentialRefusal: credentialRefusal, channel: channel) {
        case .reject(let reason, let error):
            report.outcome = .rejected
            report.outcomeReason = reason
            logger.info("broadcast refused before sending", ["reason": "\(reason)", "error": error])
            return try await settleUnsent(report, outcome: "REJECTED", request: request, key: key, requestedAt: requestedAt, logger: logger)
        case .send(var admitted):
            admitted.apnsRequestID = admitted.apnsRequestID ?? .random()
            apnsRequest = admitted
        }

        return try await sendAdmitted(
            apnsRequest, report: report, options: options, environment: environment, request: request, key: key, requestedAt: requestedAt,
            logger: logger)
    }

    /// An admitted broadcast: its intent row (`PENDING`, holding the `FAILED` `OUTCOME_REASON_UNCONFIRMED`
    /// report a redelivery would publish), the Apple request, then the outcome recorded and reported.
    /// - Throws: `PostgresError`, `KafkaError`, `CancellationError` (the intent row stays `PENDING`).
    private func sendAdmitted(
        _ apnsRequest: APNsBroadcastRequest, report: BroadcastReport, options: APNsSendOptions, environment: APNsEnvironment,
        request: SendRequest, key: String, requestedAt: Int64, logger: Logger
    ) async throws -> RecordOutcome {
        var report = report
        // The intent: what a redelivery publishes if this process stops before the answer is recorded.
        report.apnsRequestID = apnsRequest.apnsRequestID?.uuidString ?? ""
        report.sentAtMs = clock.nowMilliseconds()
        var pending = report
        pending.outcome = .failed
        pending.outcomeReason = .unconfirmed
        pending.attempts = 1
        pending.completedAtMs = report.sentAtMs
        let pendingEvent = feedback.event(.broadcastReport(pending), traceParent: request.traceParent).serializedBytes()
        if let found = try await store.insertBroadcastRow(
            requestID: request.requestID, key: key, requestedAtMs: requestedAt, outcome: TokenStore.pendingBroadcastOutcome, httpStatus: 0,
            apnsReason: "", attempts: 1, event: pendingEvent) {
            return try await republishBroadcast(found, request: request, key: key, requestedAt: requestedAt, logger: logger)
        }

        let settled = BroadcastSettlement(report: report)
        let outcome: BroadcastSettlement.Result
        do {
            outcome = settled.answered(try await sender.broadcast(apnsRequest, environment: environment, options: options), now: clock.nowMilliseconds())
        } catch let error as APNsError {
            outcome = settled.failed(error, now: clock.nowMilliseconds())
            logger.warning("broadcast got no answer", ["error": "\(error)"])
        }
        report = outcome.report
        if outcome.channelGone {
            try await channelNotRegisteredAtApple(bundleID: report.bundleID, environment: environment, channelID: report.channelID)
        }
        let event = feedback.event(.broadcastReport(report), traceParent: request.traceParent).serializedBytes()
        let name = report.outcome.protoName ?? "FAILED"
        try await store.settleBroadcastRow(
            requestID: request.requestID, key: key, outcome: name, httpStatus: Int(report.httpStatus), apnsReason: report.apnsReason,
            apnsID: report.apnsRequestID, attempts: Int(report.attempts), event: event)
        return try await finishBroadcast(event: event, outcome: name, request: request, requestedAt: requestedAt)
    }

    /// A broadcast settled without an Apple request (cancelled, or refused by ``BroadcastAdmission``):
    /// its row and report recorded, then published; a row found already recorded is published instead.
    private func settleUnsent(
        _ report: BroadcastReport, outcome: String, request: SendRequest, key: String, requestedAt: Int64, logger: Logger
    ) async throws -> RecordOutcome {
        var report = report
        report.completedAtMs = clock.nowMilliseconds()
        let event = feedback.event(.broadcastReport(report), traceParent: request.traceParent).serializedBytes()
        if let found = try await store.insertBroadcastRow(
            requestID: request.requestID, key: key, requestedAtMs: requestedAt, outcome: outcome, httpStatus: 0, apnsReason: "",
            attempts: 0, event: event) {
            return try await republishBroadcast(found, request: request, key: key, requestedAt: requestedAt, logger: logger)
        }
        return try await finishBroadcast(event: event, outcome: outcome, request: request, requestedAt: requestedAt)
    }

    /// A redelivered broadcast: its recorded report again (same event id), a pending intent settled
    /// `FAILED` (`OUTCOME_REASON_UNCONFIRMED`, the report stored with it); never a second broadcast.
    private func republishBroadcast(
        _ found: TokenStore.BroadcastLogRow, request: SendRequest, key: String, requestedAt: Int64, logger: Logger
    ) async throws -> RecordOutcome {
        var outcome = found.outcome
        if outcome == TokenStore.pendingBroadcastOutcome {
            logger.warning("a broadcast was sent and its answer never recorded: reported FAILED (unconfirmed), not sent again", [:])
            try await store.settleUnconfirmedBroadcast(requestID: request.requestID, key: key)
            outcome = "FAILED"
        } else {
            logger.info("broadcast already recorded: its report is published again, nothing is sent", ["outcome": outcome])
        }
        return try await finishBroadcast(event: found.event, outcome: outcome, request: request, requestedAt: requestedAt)
    }

    /// Publishes the broadcast's report (awaiting Kafka's acknowledgement), then its `RequestCompleted`.
    private func finishBroadcast(event: [UInt8], outcome: String, request: SendRequest, requestedAt: Int64) async throws -> RecordOutcome {
        try await feedback.publish(serialized: event, key: request.requestID, traceParent: request.traceParent)
        let completion = RequestCompletion(
            requestID: request.requestID, requestedAtMs: requestedAt, counts: RequestCompletion.counts([outcome: 1]),
            status: .final(cancelRequested: cancellations.contains(request.requestID)), lane: .transactional, traceParent: request.traceParent)
        try await complete(completion, acks: Acknowledgements())
        return .finished
    }

    // MARK: The channel row

    /// What ``BroadcastAdmission`` knows of the channel: its `channels` row by Apple's id for the app
    /// in the environment (`ChannelStore`). No row, or a row that is not `active` (deleted, failed,
    /// still creating, being deleted): not registered, and no Apple request.
    /// - Throws: `PostgresError`.
    func channelForBroadcast(bundleID: String, environment: APNsEnvironment, channelID: String) async throws -> BroadcastAdmission.Channel {
        guard let row = try await channelStore.row(bundleID: bundleID, environment: Environment(environment), channelID: channelID),
              row.state == .active
        else { return .notRegistered }
        return .active(policy: row.storagePolicy == .mostRecentMessageStored ? .mostRecentMessageStored : .noMessageStored, name: row.name)
    }

    /// After Apple answered `ChannelNotRegistered` or `BadChannelId`: the channel's row becomes
    /// `deleted` (Apple no longer knows it, whoever deleted it).
    /// - Throws: `PostgresError`.
    func channelNotRegisteredAtApple(bundleID: String, environment: APNsEnvironment, channelID: String) async throws {
        guard let row = try await channelStore.row(bundleID: bundleID, environment: Environment(environment), channelID: channelID) else { return }
        if try await channelStore.transition(row, from: [.active, .deleting], to: .deleted, nowMs: clock.nowMilliseconds()) != nil {
            logger.warning("APNs no longer knows the channel: its row is marked deleted", [
                "bundle_id": bundleID, "environment": "\(environment)", "name": row.name, "channel_id": channelID,
            ])
        }
    }
}

/// A broadcast's outcome from Apple's answer or the client's error, as a value
/// (docs/live-activities.md "Never broadcast twice"): 200 `DELIVERED` with `apns-unique-id`;
/// `ChannelNotRegistered` or `BadChannelId` `REJECTED` with `OUTCOME_REASON_CHANNEL_NOT_REGISTERED`
/// (and the channel row is to be marked deleted); another 4xx `REJECTED` (a provider-token reason with
/// `OUTCOME_REASON_PROVIDER_TOKEN_FAULT`); 429 and 5xx `FAILED` (a broadcast is never retried after it
/// may have reached Apple); no answer: `FAILED`, `OUTCOME_REASON_UNCONFIRMED` when it was sent.
struct BroadcastSettlement: Sendable {
    /// The report before the outcome (ids, app, channel, times).
    var report: BroadcastReport

    /// The settled report, and whether Apple no longer knows the channel.
    struct Result: Sendable {
        var report: BroadcastReport
        var channelGone = false
    }

    func answered(_ answer: APNsChannelAnswer, now: Int64) -> Result {
        var report = report
        report.completedAtMs = now
        report.attempts = UInt32(clamping: answer.attempts)
        report.httpStatus = UInt32(clamping: answer.status)
        report.apnsReason = answer.reason?.rawValue ?? ""
        report.apnsUniqueID = answer.apnsUniqueID ?? ""
        if let echoed = answer.apnsRequestID, !echoed.isEmpty { report.apnsRequestID = echoed }
        var channelGone = false
        switch (answer.status, answer.reason) {
        case (200, _):
            report.outcome = .delivered
        case (_, .channelNotRegistered?), (_, .badChannelId?):
            report.outcome = .rejected
            report.outcomeReason = .channelNotRegistered
            channelGone = true
        case (429, _), (500...599, _):
            report.outcome = .failed
        default:
            report.outcome = .rejected
            if let reason = answer.reason, reason.isProviderTokenFault { report.outcomeReason = .providerTokenFault }
        }
        return Result(report: report, channelGone: channelGone)
    }

    func failed(_ error: APNsError, now: Int64) -> Result {
        var report = report
        report.completedAtMs = now
        report.outcome = .failed
        report.attempts = UInt32(clamping: error.attempts)
        if error.code == .unconfirmed {
            report.outcomeReason = .unconfirmed
        } else {
            report.outcomeReason = SendRequestProcessor.outcomeReason(for: error)
            if report.outcomeReason == .invalidRequest { report.outcome = .rejected }
        }
        return Result(report: report)
    }
}
