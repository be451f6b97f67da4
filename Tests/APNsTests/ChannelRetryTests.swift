import APNs
import Testing

/// ``APNsChannelRetry``'s table, without I/O: channel management retries what device pushes retry;
/// a broadcast is sent again only when it provably never reached Apple.
@Suite struct ChannelRetryTests {
    let backoff = APNsClient.Configuration.Backoff(initial: .milliseconds(100), maximum: .seconds(1))

    func retry(_ request: APNsChannelRetry.Request, deadline: Int64 = 10_000) -> APNsChannelRetry {
        APNsChannelRetry(request: request, backoff: backoff, maxUnprocessedResends: 2, deadlineMilliseconds: deadline)
    }

    @Test func aFinalDecisionCarriesTheAnswerWithItsAttempts() {
        var machine = retry(.read)
        let refused = APNsChannelAnswer(status: 503, reason: .serviceUnavailable, channelID: "c1")
        #expect(machine.handle(.answered(refused), nowMilliseconds: 0, random: 1) == .retry(after: .milliseconds(100), change: .none))
        let gone = APNsChannelAnswer(status: 400, reason: .channelNotRegistered, channelID: "c1")
        var expected = gone
        expected.attempts = 2
        #expect(machine.handle(.answered(gone), nowMilliseconds: 100, random: 1) == .final(expected))
    }

    @Test func aBroadcastAnswerIsAlwaysFinalAndALostOneIsUnconfirmed() {
        for (status, reason) in [(200, nil), (500, APNsReason.internalServerError), (503, .serviceUnavailable), (503, .shutdown),
                                 (429, .tooManyRequests), (403, .expiredProviderToken), (400, .channelNotRegistered)] as [(Int, APNsReason?)] {
            var machine = retry(.broadcast)
            #expect(machine.handle(.answered(APNsChannelAnswer(status: status, reason: reason)), nowMilliseconds: 0, random: 1).isFinal, "\(status)")
            #expect(machine.attempts == 1)
        }
        var lost = retry(.broadcast)
        #expect(lost.handle(.lost, nowMilliseconds: 0, random: 1) == .stop(.mayHaveBeenSent))
        var notSent = retry(.broadcast)
        #expect(notSent.handle(.notSent, nowMilliseconds: 0, random: 1) == .retry(after: .milliseconds(100), change: .none))
        #expect(notSent.handle(.notProcessed, nowMilliseconds: 0, random: 1) == .retry(after: .zero, change: .none))
        #expect(notSent.handle(.notProcessed, nowMilliseconds: 0, random: 1) == .retry(after: .zero, change: .none))
        #expect(notSent.handle(.notProcessed, nowMilliseconds: 0, random: 1) == .stop(.tooManyUnprocessedResends))
        #expect(notSent.attempts == 0, "never reached Apple")
        var late = retry(.broadcast, deadline: 50)
        #expect(late.handle(.notSent, nowMilliseconds: 0, random: 1) == .stop(.deadline))
    }

    @Test func managementRetriesServerErrorsWithBackoffUntilTheDeadline() {
        for request in [APNsChannelRetry.Request.create, .read, .delete, .list] {
            var machine = retry(request, deadline: 350)
            #expect(machine.handle(.answered(APNsChannelAnswer(status: 503, reason: .serviceUnavailable)), nowMilliseconds: 0, random: 1)
                == .retry(after: .milliseconds(100), change: .none))
            #expect(machine.handle(.answered(APNsChannelAnswer(status: 429, reason: .tooManyRequests)), nowMilliseconds: 100, random: 1)
                == .retry(after: .milliseconds(200), change: .none))
            #expect(machine.handle(.answered(APNsChannelAnswer(status: 500, reason: .internalServerError)), nowMilliseconds: 300, random: 1).isFinal,
                    "past the deadline Apple's last answer is the result")
            #expect(machine.attempts == 3)
            var fatal = retry(request)
            #expect(fatal.handle(.answered(APNsChannelAnswer(status: 400, reason: .cannotCreateChannelConfig)), nowMilliseconds: 0, random: 1).isFinal)
            var shutdown = retry(request)
            #expect(shutdown.handle(.answered(APNsChannelAnswer(status: 503, reason: .shutdown)), nowMilliseconds: 0, random: 1) == .retry(after: .zero, change: .retire))
            var expired = retry(request)
            #expect(expired.handle(.answered(APNsChannelAnswer(status: 403, reason: .expiredProviderToken)), nowMilliseconds: 0, random: 1)
                == .retry(after: .zero, change: .renewProviderToken))
            #expect(expired.handle(.answered(APNsChannelAnswer(status: 403, reason: .expiredProviderToken)), nowMilliseconds: 0, random: 1).isFinal, "renewed once")
        }
    }

    @Test func aLostAnswerRepeatsReadDeleteListButNotCreate() {
        var create = retry(.create)
        #expect(create.handle(.lost, nowMilliseconds: 0, random: 1) == .stop(.mayHaveBeenSent))
        for request in [APNsChannelRetry.Request.read, .delete, .list] {
            var machine = retry(request, deadline: 150)
            #expect(machine.handle(.lost, nowMilliseconds: 0, random: 1) == .retry(after: .milliseconds(100), change: .none))
            #expect(machine.handle(.lost, nowMilliseconds: 100, random: 1) == .stop(.deadline))
            #expect(machine.attempts == 2)
        }
    }

    @Test func channelReasonsAreApplesStrings() {
        let names = ["MissingChannelId", "BadChannelId", "ChannelNotRegistered", "FeatureNotEnabled", "CannotCreateChannelConfig",
                     "BadRequestPayload", "MissingPushType"]
        #expect(APNsReason.channelReasons.map(\.rawValue) == names)
        for name in names {
            let reason = APNsReason(rawValue: name)
            #expect(reason.rawValue == name && reason.httpStatus == 400 && reason.action == .reject, "\(name)")
            if case .unknown = reason { Issue.record("\(name) is unknown") }
        }
    }
}

extension APNsChannelRetry.Action {
    /// Whether Apple's answer is the result.
    var isFinal: Bool {
        if case .final = self { true } else { false }
    }
}
