import APNs
import Testing

/// `APNsTopicScopeRefresh` without I/O: a warm connection's `TopicDisallowed` earns one round of new
/// connections; a really disallowed topic does not churn them.
@Suite struct TopicScopeRefreshTests {
    @Test func theFirstRefusalReplacesTheConnectionsOpenedBeforeIt() {
        var rule = APNsTopicScopeRefresh(minimumInterval: .seconds(600))
        #expect(rule.topicDisallowed(connectionOpenedAt: 1_000, now: 50_000) == .retryOnNewConnection(retireOpenedBefore: 50_000))
        #expect(rule.lastRefresh == 50_000)
        // Another send refused on a connection from before the replacement: retry, nothing more to retire.
        #expect(rule.topicDisallowed(connectionOpenedAt: 2_000, now: 50_010) == .retryOnNewConnection(retireOpenedBefore: nil))
        // Refused on a connection opened since: the topic is really disallowed, final.
        #expect(rule.topicDisallowed(connectionOpenedAt: 50_100, now: 50_200) == .final)
        #expect(rule.topicDisallowed(connectionOpenedAt: 50_100, now: 649_999) == .final)
        // Ten minutes later the pool may replace its connections again (a later scope change).
        #expect(rule.topicDisallowed(connectionOpenedAt: 50_100, now: 650_000) == .retryOnNewConnection(retireOpenedBefore: 650_000))
    }

    @Test func theRetryMachineRetriesTopicDisallowedOnceOnANewConnection() {
        var machine = APNsRetryStateMachine(
            policy: .init(backoff: .init(initial: .milliseconds(1), maximum: .milliseconds(2)), tooManyRequestsDelay: .seconds(1),
                          providerTokenUpdateDelay: .seconds(1), maxUnprocessedResends: 1),
            deadlineMilliseconds: 10_000)
        #expect(machine.handle(.response(status: 400, reason: .topicDisallowed), nowMilliseconds: 0)
            == .retry(after: .zero, reason: nil, change: .newConnectionForTopic))
        #expect(machine.handle(.response(status: 400, reason: .topicDisallowed), nowMilliseconds: 1) == .stop(.final))
        #expect(machine.attempts == 2)
    }
}
