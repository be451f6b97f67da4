import APNs
import Foundation
import PushDomain
import PushMessages
import ServiceCore

/// One send of one notification, as the send and settle stages take it: the same for a notification
/// of a request or page and for a parked one re-driven.
struct SendAttempt: Sendable {
    var apnsRequest: APNsRequest
    var environment: APNsEnvironment
    /// The report known before sending (token, app, request fields, `sent_at_ms`).
    var report: DeliveryReport
    /// Attempts made by earlier deliveries (a parked notification), added to the client's count.
    var earlierAttempts = 0
    var options: APNsSendOptions
    var traceParent: String
    /// The environments the request lets the notification reach, for the other-environment try after
    /// `BadDeviceToken` (`.unknown` for a parked notification: no try).
    var scope: OtherEnvironmentTry.RequestScope
}

// MARK: - Stages 3 and 4: send, settle

extension SendRequestProcessor {
    /// Sends (or settles without sending) one admitted target, then records and publishes its outcome.
    /// - Returns: the outcome that stands, or `.parked` when the waiter parked the notification.
    /// - Throws: `CancellationError` when stopped while sending; `PostgresError`, `KafkaError`.
    func send(_ target: DeliveryTarget, _ context: DeliveryContext, permit: NotificationPermit,
              activity: RecordActivity) async throws -> NotificationResult {
        let request = context.request
        var report = DeliveryReport()
        report.requestID = request.requestID
        report.bundleID = context.template.bundleID
        report.pushType = PushType(context.template.pushType)
        report.requestedAtMs = context.requestedAt
        report.collapseID = context.template.collapseID ?? ""
        switch target {
        case .outcome(let token, let userID, let environment, let outcome, let reason):
            report.deviceToken = token
            report.userID = userID
            report.environment = environment.map(Environment.init) ?? .unspecified
            report.outcome = outcome
            report.outcomeReason = reason
            report.completedAtMs = clock.nowMilliseconds()
        case .send(let stored):
            report.deviceToken = stored.deviceToken
            report.userID = stored.userID
            report.environment = Environment(stored.environment)
            let apnsRequest = context.template.request(for: try DeviceToken(validating: stored.deviceToken))
            report.apnsID = apnsRequest.apnsID?.uuidString ?? ""
            if case .at(let seconds) = context.template.expiration, seconds * 1000 <= clock.nowMilliseconds() {
                // Its apns-expiration passed while it waited (a Kafka backlog, an outage): Apple would
                // store it for no one; it is not sent.
                report.outcome = .failed
                report.outcomeReason = .expired
                report.completedAtMs = clock.nowMilliseconds()
                break
            }
            report.sentAtMs = clock.nowMilliseconds()
            let deadline = sender.retryDeadline(for: apnsRequest)
            let parkedReport = report
            let waiter = HotPathRetryWaiter(permit: permit, context: context.retryContext, activity: activity, logger: logger) {
                [parking] delay, attempts, reason in
                var pending = parkedReport
                pending.attempts = UInt32(clamping: attempts)
                let retry = PendingRetry(
                    request: apnsRequest, environment: stored.environment, report: pending, traceParent: request.traceParent,
                    retryDeadline: deadline, attempts: attempts, lastReason: reason.metricLabel)
                try await parking.park(retry, delay: delay)
            }
            let attempt = SendAttempt(
                apnsRequest: apnsRequest, environment: stored.environment, report: report,
                options: APNsSendOptions(waiter: waiter, retryDeadline: deadline), traceParent: request.traceParent,
                scope: Self.scope(of: request))
            guard case .settled(let settled) = try await sendAndSettle(attempt) else { return .parked }
            report = settled
        }
        return .settled(try await publishOutcome(report, traceParent: request.traceParent, acks: context.acks))
    }

    /// The one call of the APNs client: the credential lookup first (the registry's key for
    /// `bundleID` in `environment`, and the key before it as the fallback; a bundle id no key may
    /// send to comes back as `.noCredential`, nothing sent), then the send; a waiter's interruption
    /// (`WaiterEndedSend`) comes back as a value, never as an error.
    /// - Throws: what the client throws (`APNsError`, `CancellationError`).
    func send(_ request: APNsRequest, bundleID: String, environment: APNsEnvironment, options: APNsSendOptions) async throws -> SendAnswer {
        var options = options
        switch credentials?.choose(bundleID: bundleID, environment: environment) {
        case .refused(let reason)?:
            return .noCredential(reason)
        case .send(let chosen, let fallback)?:
            options.credentials = chosen
            options.fallbackCredentials = fallback
        case nil:
            break
        }
        do {
            return .answered(try await sender.send(request, environment: environment, options: options))
        } catch let ended as WaiterEndedSend {
            return .interrupted(ended.interruption)
        }
    }

    /// Sends one notification and settles it: fills the report with the outcome (not yet recorded),
    /// deactivating the token when Apple says so.
    /// - Returns: the settled report, or `.parked` when the waiter parked the notification.
    /// - Throws: `CancellationError` when stopped while sending (not an outcome: the record stays
    ///   unfinished); `PostgresError`/`KafkaError` from deactivating a token.
    func sendAndSettle(_ attempt: SendAttempt) async throws -> NotificationResult {
        var report = attempt.report
        do {
            let response: APNsResponse
            switch try await send(attempt.apnsRequest, bundleID: report.bundleID, environment: attempt.environment, options: attempt.options) {
            case .answered(let answer): response = answer
            case .interrupted: return .parked
            case .noCredential(let reason): return .settled(refusedForCredentials(report, reason: reason, environment: attempt.environment))
            }
            report.attempts = UInt32(clamping: attempt.earlierAttempts + response.attempts)
            report.completedAtMs = clock.nowMilliseconds()
            report.httpStatus = UInt32(response.status)
            report.apnsID = response.apnsID ?? report.apnsID
            report.apnsUniqueID = response.apnsUniqueID ?? ""
            report.apnsReason = response.reason?.rawValue ?? ""
            report = try await settle(report, response: response, attempt)
        } catch let error as CancellationError {
            throw error
        } catch where Task.isCancelled {
            // Stopped while sending: not an outcome. The record stays unfinished and is read again.
            throw CancellationError()
        } catch {
            report.attempts = UInt32(clamping: attempt.earlierAttempts + ((error as? APNsError)?.attempts ?? 1))
            report.completedAtMs = clock.nowMilliseconds()
            report.outcomeReason = Self.outcomeReason(for: error)
            report.outcome = report.outcomeReason == .invalidRequest ? .rejected : .failed
            logger.warning("APNs send failed", [
                "request_id": report.requestID, "apns_id": report.apnsID, "token": Logger.shortened(token: report.deviceToken),
                "error": "\(error)",
            ])
        }
        return .settled(report)
    }

    /// A notification no credential may send, settled REJECTED with `OUTCOME_REASON_NO_CREDENTIAL`:
    /// no Apple request, the token stays active. Logged at most once every 5 s (the reason names the
    /// registry entry, never key material).
    func refusedForCredentials(_ report: DeliveryReport, reason: String, environment: APNsEnvironment) -> DeliveryReport {
        var report = report
        report.outcome = .rejected
        report.outcomeReason = .noCredential
        report.completedAtMs = clock.nowMilliseconds()
        if let suppressed = recordWarnings.withLock({ $0.admit("no_credential", now: .now) }) {
            logger.warning("notification refused before sending: no APNs credential", [
                "request_id": report.requestID, "bundle_id": report.bundleID, "environment": environment.rawValue, "reason": reason,
                "suppressed": "\(suppressed)",
            ])
        }
        return report
    }

    /// The outcome of Apple's final answer: delivered, rejected (the token deactivated when Apple
    /// says so, after the other-environment try), or failed past the retry horizon.
    private func settle(_ report: DeliveryReport, response: APNsResponse, _ attempt: SendAttempt) async throws -> DeliveryReport {
        var report = report
        switch response.action {
        case _ where response.isSuccess:
            report.outcome = .delivered
        case .deactivateToken where response.reason == .badDeviceToken:
            // docs/semantics.md "The other environment after BadDeviceToken": one try there for
            // an app that opted in; else (or refused there too) deactivated as for every app.
            switch try await tryOtherEnvironment(
                attempt.apnsRequest, refusedIn: attempt.environment, report: report, scope: attempt.scope,
                retryDeadline: attempt.options.retryDeadline) {
            case .delivered(let delivered):
                report = delivered
            case .notDelivered(let extraAttempts):
                report.attempts = UInt32(clamping: Int(report.attempts) + extraAttempts)
                report.outcome = .rejected
                try await invalidate(report.deviceToken, response: response, report: report, traceParent: attempt.traceParent)
            }
        case .deactivateToken:
            report.outcome = .rejected
            try await invalidate(report.deviceToken, response: response, report: report, traceParent: attempt.traceParent)
        case .reject:
            report.outcome = .rejected
        case _ where response.hasUnknownReason:
            report.outcome = .rejected
        default:
            // The client retried as far as the rules allow and gave up: final.
            report.outcome = .failed
            report.outcomeReason = .retryHorizonExceeded
        }
        if let reason = response.reason, Self.isProviderTokenFault(reason) { report.outcomeReason = .providerTokenFault }
        return report
    }

    /// The dispatcher's reason for a send that threw (docs/contracts.md "Outcome reasons"): a stream
    /// APNs left unanswered, our own credentials, our own validation, or else the connection.
    static func outcomeReason(for error: any Error) -> OutcomeReason {
        guard let error = error as? APNsError else { return .connectionError }
        if error.isStreamTimeout { return .streamTimeout }
        switch error.code {
        case .missingCredentials, .invalidSigningKey, .signingFailed, .invalidCertificate, .invalidPKCS12:
            return .providerTokenFault
        case .invalidRequest, .invalidDeviceToken, .payloadDoesNotMatchPushType, .topicDoesNotMatchPushType:
            return .invalidRequest
        case .retryHorizonExceeded:
            return .retryHorizonExceeded
        default:
            return .connectionError
        }
    }

    /// Apple's reasons that blame our provider token or certificate, not the notification: the APNs
    /// module's one list, `APNsReason.isProviderTokenFault`.
    static func isProviderTokenFault(_ reason: APNsReason) -> Bool { reason.isProviderTokenFault }
}
