import APNs
import PushDomain
import PushMessages
import ServiceCore
import Testing

@testable import DispatcherCore

/// `BroadcastAdmission` and `BroadcastSettlement` without I/O (docs/live-activities.md "Never
/// broadcast twice"): what may go to Apple, and what Apple's answer or silence makes of it.
@Suite struct BroadcastAdmissionTests {
    static let channel = "dHmp9L2t0Bc="
    static let payload = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"1-0"}}}"#

    func notification(_ pushType: PushType = .liveactivity, priority: UInt32 = 0, expiration: Int64? = nil,
                      payload: String = payload, apnsID: String = "") -> PushMessages.Notification {
        var notification = PushMessages.Notification(bundleID: "com.example.app", environment: .production, pushType: pushType, payload: payload)
        notification.priority = priority
        notification.expiration = expiration
        notification.apnsID = apnsID
        return notification
    }

    func decide(_ notification: PushMessages.Notification, refusal: String? = nil,
                channel: BroadcastAdmission.Channel = .active(policy: .noMessageStored, name: "match-1")) -> BroadcastAdmission.Decision {
        BroadcastAdmission.decide(channelID: Self.channel, notification: notification, credentialRefusal: refusal, channel: channel)
    }

    func reason(_ decision: BroadcastAdmission.Decision) -> OutcomeReason? {
        if case .reject(let reason, _) = decision { return reason }
        return nil
    }

    @Test func anAdmittedBroadcastIsSentAsAsked() throws {
        guard case .send(let request) = decide(notification()) else { Issue.record("refused"); return }
        #expect(request.bundleID == "com.example.app" && request.channelID == Self.channel && request.pushType == .liveactivity)
        #expect(request.priority == .immediately && request.expiration == .immediately, "unset: priority 10, expiration 0")
        #expect(request.payload == Array(Self.payload.utf8))
        let id = APNsID.random()
        guard case .send(let stored) = decide(notification(.unspecified, priority: 5, expiration: 1_900_000_000, apnsID: id.uuidString),
                                             channel: .active(policy: .mostRecentMessageStored, name: "match-1"))
        else { Issue.record("refused"); return }
        #expect(stored.priority.rawValue == 5 && stored.expiration == .at(secondsSinceEpoch: 1_900_000_000) && stored.apnsRequestID == id)
        let limit = #"{"aps":{"timestamp":1},"p":""# + String(repeating: "x", count: 5_120 - 30) + #""}"#
        #expect(limit.utf8.count == 5_120)
        #expect(reason(decide(notification(payload: limit))) == nil)
    }

    @Test func refusalsNameTheirReasonInOrder() {
        #expect(reason(decide(notification(), refusal: "no key")) == .noCredential)
        #expect(reason(decide(notification(.alert), refusal: "no key")) == .noCredential, "the credential first")
        #expect(reason(decide(notification(), channel: .notRegistered)) == .channelNotRegistered)
        #expect(reason(decide(notification(.alert), channel: .notRegistered)) == .channelNotRegistered)
        let invalid: [PushMessages.Notification] = [
            notification(.alert),
            notification(priority: 7),
            notification(expiration: -1),
            notification(apnsID: "not-a-uuid"),
            notification(payload: #"{"aps":{"event":"update"}}"#),
            notification(payload: #"{"aps":{"timestamp":"1700000000"}}"#),
            notification(payload: "not json"),
            notification(payload: #"{"aps":{"timestamp":1},"p":""# + String(repeating: "x", count: 5_121 - 30) + #""}"#),
        ]
        for candidate in invalid { #expect(reason(decide(candidate)) == .invalidRequest, "\(candidate.payload.prefix(40)) \(candidate.priority)") }
        // A No-Message-Stored channel takes only expiration 0; a Most-Recent-Message-Stored one a time too.
        #expect(reason(decide(notification(expiration: 1_900_000_000))) == .invalidRequest)
        #expect(reason(decide(notification(expiration: 0))) == nil)
        #expect(reason(decide(notification(expiration: 1_900_000_000), channel: .active(policy: .mostRecentMessageStored, name: "n"))) == nil)
    }

    @Test func settlementFollowsApplesAnswer() {
        var base = BroadcastReport()
        base.requestID = "r"
        base.channelID = Self.channel
        let settle = BroadcastSettlement(report: base)
        var ok = APNsChannelAnswer(status: 200, apnsRequestID: "a")
        ok.apnsUniqueID = "u"
        let delivered = settle.answered(ok, now: 5)
        #expect(delivered.report.outcome == .delivered && delivered.report.apnsUniqueID == "u" && !delivered.channelGone)
        #expect(delivered.report.completedAtMs == 5 && delivered.report.attempts == 1 && delivered.report.httpStatus == 200)
        for reason in [APNsReason.channelNotRegistered, .badChannelId] {
            let gone = settle.answered(APNsChannelAnswer(status: 400, reason: reason), now: 5)
            #expect(gone.report.outcome == .rejected && gone.report.outcomeReason == .channelNotRegistered && gone.channelGone)
            #expect(gone.report.apnsReason == reason.rawValue)
        }
        let expiration = settle.answered(APNsChannelAnswer(status: 400, reason: .badExpirationDate), now: 5)
        #expect(expiration.report.outcome == .rejected && expiration.report.outcomeReason == .unspecified && !expiration.channelGone)
        #expect(settle.answered(APNsChannelAnswer(status: 403, reason: .invalidProviderToken), now: 5).report.outcomeReason == .providerTokenFault)
        for status in [429, 500, 503] {
            #expect(settle.answered(APNsChannelAnswer(status: status), now: 5).report.outcome == .failed, "\(status): never retried")
        }
        let lost = settle.failed(APNsError(code: .unconfirmed, message: "lost", attempts: 1), now: 5)
        #expect(lost.report.outcome == .failed && lost.report.outcomeReason == .unconfirmed && lost.report.attempts == 1)
        let never = settle.failed(APNsError(code: .retryHorizonExceeded, message: "no connection"), now: 5)
        #expect(never.report.outcome == .failed && never.report.outcomeReason == .retryHorizonExceeded && never.report.attempts == 0)
    }

    @Test func theDecoderAcceptsAChannelTargetAndChecksItsShape() throws {
        func request(_ channelID: String, sendAt: Int64 = 0, environment: PushMessages.Environment = .production) -> SendRequest {
            var request = SendRequest(requestID: "r-1", target: .channelID(channelID), notification: notification())
            request.notification?.environment = environment
            request.sendAtMs = sendAt
            return request
        }
        try SendRequestDecoder.check(request(Self.channel))
        // Content problems are the BroadcastReport's (REJECTED), not the intake's.
        var noTimestamp = request(Self.channel)
        noTimestamp.notification?.payload = "{}"
        try SendRequestDecoder.check(noTimestamp)
        for (bad, field) in [(request(""), "channel_id"), (request("a b"), "channel_id"), (request(String(repeating: "A", count: 257)), "channel_id"),
                             (request(Self.channel, sendAt: 1), "send_at_ms")] {
            #expect(throws: SendRequestDecoder.Rejection.self) { try SendRequestDecoder.check(bad) }
            do { try SendRequestDecoder.check(bad) } catch { #expect(error.description.hasPrefix(field), "\(error.description)") }
        }
    }
}

/// The broadcast-channel hosts are settings (docs/live-activities.md "Where Apple is").
@Suite struct BroadcastSettingsTests {
    @Test func channelAndBroadcastURLsAreRead() throws {
        let defaults = try DispatcherProgram.apnsClient(EnvironmentConfig([:]))
        #expect(defaults.channelsProduction == .init(host: "api-manage-broadcast.push.apple.com", port: 2196))
        #expect(defaults.channelsSandbox == .init(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195))
        #expect(defaults.broadcastProduction == .init(host: "api-broadcast.push.apple.com", port: 443))
        #expect(defaults.broadcastSandbox == .init(host: "api-broadcast.sandbox.push.apple.com", port: 443))
        let set = try DispatcherProgram.apnsClient(EnvironmentConfig([
            "PUSH_APNS_CHANNELS_URL_PRODUCTION": "https://127.0.0.1:2197", "PUSH_APNS_CHANNELS_URL_SANDBOX": "https://127.0.0.1:2198",
            "PUSH_APNS_BROADCAST_URL_PRODUCTION": "https://api.push.apple.com", "PUSH_APNS_BROADCAST_URL_SANDBOX": "https://sim.local:9",
        ]))
        #expect(set.channelsProduction == .init(host: "127.0.0.1", port: 2197) && set.channelsSandbox == .init(host: "127.0.0.1", port: 2198))
        #expect(set.broadcastProduction == .init(host: "api.push.apple.com", port: 443) && set.broadcastSandbox == .init(host: "sim.local", port: 9))
        #expect(set.production == defaults.production, "device pushes keep their own host")
        let bad = EnvironmentConfig(["PUSH_APNS_BROADCAST_URL_SANDBOX": "http://x"], collectingErrors: true)
        _ = try DispatcherProgram.apnsClient(bad)
        #expect(bad.errors.map(\.variable) == ["PUSH_APNS_BROADCAST_URL_SANDBOX"])
    }
}
