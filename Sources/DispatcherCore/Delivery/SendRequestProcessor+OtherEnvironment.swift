import APNs
import Foundation
import PushDomain
import PushMessages
import ServiceCore

extension SendRequestProcessor {
    /// How the opt-in try on the other environment ended.
    enum OtherEnvironmentResult: Sendable {
        /// Apple accepted the notification there: the report, settled `DELIVERED` from that environment.
        case delivered(DeliveryReport)
        /// No try, or refused or unanswered there: deactivate as without the opt-in. `extraAttempts`
        /// is what the try added to the notification's attempts (0 without a try).
        case notDelivered(extraAttempts: Int)
    }

    /// The environments `request` lets its notifications reach: the notification's environment, or
    /// its audience's, when one is named.
    static func scope(of request: SendRequest) -> OtherEnvironmentTry.RequestScope {
        if let environment = request.notification?.environment.apnsEnvironment { return .only(environment) }
        if case .audience(let audience)? = request.target, let environment = audience.environment.apnsEnvironment {
            return .only(environment)
        }
        return .anyEnvironment
    }

    /// After `environment` answered `BadDeviceToken`: decides with `OtherEnvironmentTry` whether to
    /// send once to the other environment, does so, and corrects the token's row when Apple accepts
    /// it there (docs/semantics.md "The other environment after BadDeviceToken"). For an app that did
    /// not opt in it does nothing at all (no query, no log line).
    /// - Parameters:
    ///   - report: the report filled with the refusal's fields (attempts so far, `sent_at_ms`).
    ///   - retryDeadline: the notification's retry deadline, kept for the one try.
    /// - Throws: `CancellationError` when stopped; `PostgresError` from looking up the token's row,
    ///   before anything was sent there (`sendAndSettle` then settles the notification as it does when
    ///   deactivating fails). A failed correction is logged, never thrown: the notification was
    ///   delivered and must not be sent again.
    func tryOtherEnvironment(_ apnsRequest: APNsRequest, refusedIn environment: APNsEnvironment, report: DeliveryReport,
                             scope: OtherEnvironmentTry.RequestScope, retryDeadline: Date?) async throws -> OtherEnvironmentResult {
        let optedIn = otherEnvironmentRetry.optedIn(report.bundleID)
        guard optedIn else { return .notDelivered(extraAttempts: 0) }
        let configured = otherEnvironmentRetry.configuredEnvironments.contains(environment.other)
        var storedEnvironment: APNsEnvironment?
        if configured, scope == .anyEnvironment, let row = try await store.tokens([report.deviceToken])[report.deviceToken], row.isActive {
            storedEnvironment = row.environment
        }
        var decision = OtherEnvironmentTry()
        let first = decision.handle(.badDeviceToken(OtherEnvironmentTry.Refusal(
            environment: environment, optedIn: optedIn, otherEnvironmentConfigured: configured, scope: scope,
            storedEnvironment: storedEnvironment)))
        let token = Logger.shortened(token: report.deviceToken)
        guard case .send(let other) = first else {
            if case .deactivate(let why) = first {
                logger.info("no try on the other APNs environment after BadDeviceToken", [
                    "request_id": report.requestID, "token": token, "apns_id": report.apnsID, "environment": environment.rawValue, "why": why.rawValue,
                ])
            }
            return .notDelivered(extraAttempts: 0)
        }
        let (answer, accepted, attempts) = try await tryOnce(apnsRequest, in: other, report: report, retryDeadline: retryDeadline)
        switch decision.handle(.otherEnvironmentAnswered(answer)) {
        case .correctEnvironment(let from, let to):
            guard let response = accepted else { return .notDelivered(extraAttempts: attempts) }
            var delivered = report
            delivered.outcome = .delivered
            delivered.outcomeReason = .unspecified
            delivered.environment = Environment(to)
            delivered.httpStatus = UInt32(response.status)
            delivered.apnsReason = ""
            delivered.apnsID = response.apnsID ?? report.apnsID
            delivered.apnsUniqueID = response.apnsUniqueID ?? ""
            delivered.attempts = UInt32(clamping: Int(report.attempts) + attempts)
            delivered.completedAtMs = clock.nowMilliseconds()
            var corrected = false
            do {
                corrected = try await store.correctEnvironment(
                    token: report.deviceToken, from: from, to: to, refusedSinceMs: report.sentAtMs)
            } catch let error as CancellationError {
                throw error
            } catch {
                logger.warning("correcting a token's environment failed: left to its next send", [
                    "request_id": report.requestID, "token": token, "apns_id": delivered.apnsID, "error": "\(error)",
                ])
            }
            metrics.otherEnvironmentTries.increment(labels: [corrected ? "corrected" : "accepted_not_corrected"])
            logger.info(corrected ? "token environment corrected" : "delivered on the other APNs environment; a newer registration keeps the row", [
                "request_id": report.requestID, "token": token, "apns_id": delivered.apnsID, "from": from.rawValue, "to": to.rawValue,
            ])
            return .delivered(delivered)
        case .deactivate(let why):
            metrics.otherEnvironmentTries.increment(labels: [why == .noAnswerThere ? "no_answer" : "refused"])
            logger.info("not delivered on the other APNs environment either: the token is deactivated", [
                "request_id": report.requestID, "token": token, "apns_id": report.apnsID, "environment": other.rawValue, "why": why.rawValue,
            ])
            return .notDelivered(extraAttempts: attempts)
        case .send:
            return .notDelivered(extraAttempts: attempts)  // never: the value allows one try
        }
    }

    /// The one try on `other`: a waiter that ends it at the first wait (no back-off, no parking).
    /// - Returns: Apple's answer there, the response when accepted, and the sends it took.
    /// - Throws: `CancellationError` when stopped.
    private func tryOnce(_ apnsRequest: APNsRequest, in other: APNsEnvironment, report: DeliveryReport, retryDeadline: Date?) async throws
        -> (OtherEnvironmentTry.Answer, APNsResponse?, Int)
    {
        let token = Logger.shortened(token: report.deviceToken)
        let options = APNsSendOptions(waiter: SingleTryWaiter(), retryDeadline: retryDeadline)
        let answer: OtherEnvironmentTry.Answer
        var accepted: APNsResponse?
        let attempts: Int
        do {
            switch try await send(apnsRequest, bundleID: report.bundleID, environment: other, options: options) {
            case .answered(let response):
                attempts = response.attempts
                if response.isSuccess {
                    answer = .accepted
                    accepted = response
                } else {
                    answer = .refused
                }
            case .interrupted(let interruption):
                if case .noFinalAnswer(let sent, _) = interruption { attempts = sent } else { attempts = 1 }
                answer = .noAnswer
                logger.info("no answer from the other APNs environment", [
                    "request_id": report.requestID, "token": token, "apns_id": report.apnsID, "environment": other.rawValue,
                    "error": "\(WaiterEndedSend(interruption))",
                ])
            case .noCredential(let reason):
                // No key may send there: no try (and nothing sent), as if it had not answered.
                attempts = 0
                answer = .noAnswer
                logger.info("no try on the other APNs environment: no credential", [
                    "request_id": report.requestID, "token": token, "environment": other.rawValue, "reason": reason,
                ])
            }
        } catch let error as CancellationError {
            throw error
        } catch where Task.isCancelled {
            throw CancellationError()
        } catch {
            attempts = (error as? APNsError)?.attempts ?? 1
            answer = .noAnswer
            logger.info("no answer from the other APNs environment", [
                "request_id": report.requestID, "token": token, "apns_id": report.apnsID, "environment": other.rawValue, "error": "\(error)",
            ])
        }
        return (answer, accepted, attempts)
    }

}

/// The waiter of the one try on the other environment: it ends the try at the first wait the
/// APNs client asks for (a retryable answer, a lost connection, an open circuit), so the try is one
/// attempt that never waits, holds nothing back and is never parked. The send answers
/// `SendAnswer.interrupted(.noFinalAnswer)`.
struct SingleTryWaiter: APNsRetryWaiter {
    func wait(_ delay: Duration, attemptsSoFar: Int, reason: APNsRetryReason) async throws {
        throw WaiterEndedSend(.noFinalAnswer(attempts: attemptsSoFar, reason: reason.metricLabel))
    }
}
