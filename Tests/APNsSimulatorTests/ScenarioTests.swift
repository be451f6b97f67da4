import APNs
import APNsSimulator
import Foundation
import ServiceCore
import Testing

/// The simulator driven by clients we did not write (Python h2, httpx, aioapns): every check of
/// docs/apns-protocol.md §2, every reason of §3, the token-auth rules of §4, certificate auth (§5), the
/// stream rules of §6, and every fault. Each test owns a simulator on free ports.
@Suite(.timeLimit(.minutes(1)))
struct ScenarioTests {
    @Test func requestChecksGiveApplesStatusAndBody() async throws {
        try await withSimulator { simulator, credentials in
            try await runScenario("request_checks", simulator, credentials)
            // Cross-check from inside: every answer was recorded with its reason.
            let counters = simulator.counters()
            for reason in ["MethodNotAllowed", "BadPath", "MissingDeviceToken", "BadDeviceToken", "InvalidPushType",
                           "MissingTopic", "BadTopic", "TopicDisallowed", "BadPriority", "BadExpirationDate",
                           "BadMessageId", "BadCollapseId", "DuplicateHeaders", "PayloadEmpty", "PayloadTooLarge"] {
                #expect(counters.keys.contains { $0.hasSuffix(" " + reason) }, "no \(reason) in \(counters)")
            }
        }
    }

    @Test func providerTokenRejections() async throws {
        try await withSimulator { simulator, credentials in
            try await runScenario("provider_token_rejections", simulator, credentials)
            #expect(simulator.counters()["403 InvalidProviderToken"] == 4)
        }
    }

    @Test func oneStreamUntilAValidTokenSucceeded() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("stream_limit", simulator, credentials) }
    }

    @Test func expiredProviderTokenByInjectedClock() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("expired_provider_token", simulator, credentials) }
    }

    @Test func tooManyProviderTokenUpdates() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("too_many_provider_token_updates", simulator, credentials) }
    }

    @Test func keyBindingAndEnvironmentRestrictedKeys() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("key_binding", simulator, credentials) }
    }

    @Test func topicSpecificKeysAndConnectionBinding() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("topic_scoped_keys", simulator, credentials) }
    }

    @Test func broadcastChannelsAndBroadcasts() async throws {
        try await withSimulator(configure: { configuration, _ in configuration.channelLimit = 3 }) { simulator, credentials in
            try await runScenario("broadcast_channels", simulator, credentials)
        }
    }

    @Test func tokenRegistryAndUnregisteredTokens() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("token_registry", simulator, credentials) }
    }

    @Test func certificateAuthentication() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("certificate_auth", simulator, credentials) }
    }

    @Test func statusShares() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("status_shares", simulator, credentials) }
    }

    @Test func perTokenRateLimit() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("token_rate_limit", simulator, credentials) }
    }

    @Test func latencyDoesNotBlockTheEventLoop() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("latency", simulator, credentials) }
    }

    @Test func goAwayAfterStreams() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("goaway_after_streams", simulator, credentials) }
    }

    @Test func goAwayEveryInterval() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("goaway_every", simulator, credentials) }
    }

    @Test func dropWithoutGoAway() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("drop_without_goaway", simulator, credentials) }
    }

    @Test func unansweredRequests() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("unanswered", simulator, credentials) }
    }

    /// Answers for held tokens wait until released through the admin API, one token or all; the
    /// other streams of the same connection are answered meanwhile.
    @Test func heldAnswersWaitForTheirRelease() async throws {
        try await withSimulator { simulator, credentials in
            try await runScenario("hold", simulator, credentials)
            #expect(simulator.heldTokens().isEmpty, "the scenario releases every held answer")
        }
    }

    @Test func maxConcurrentStreamsSchedule() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("settings_schedule", simulator, credentials) }
    }

    @Test func adminObservability() async throws {
        try await withSimulator { simulator, credentials in
            try await runScenario("observability", simulator, credentials)
            #expect(simulator.receivedRequests().isEmpty, "the scenario ends with a reset")
        }
    }

    @Test func configFileFaultsAndTokens() async throws {
        let gone = String(repeating: "ab", count: 32)
        let productionToken = String(repeating: "cd", count: 32)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("apns-sim-config-\(UUID().uuidString).json")
        try """
            {"faults": {"status_shares": {"500": 1.0}},
             "tokens": [{"token": "\(productionToken)", "environment": "production", "bundle_id": "com.example.app"}],
             "unregistered": [{"token": "\(gone)", "timestamp_ms": 42}]}
            """.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        try await withSimulator(configure: { configuration, _ in try configuration.apply(configFile: file.path) }) { simulator, credentials in
            try await runScenario("config_file", simulator, credentials, extraEnvironment: [
                "SIM_FILE_UNREGISTERED": gone, "SIM_FILE_PRODUCTION_TOKEN": productionToken,
            ])
        }
    }

    @Test func aioapnsClient() async throws {
        try await withSimulator { simulator, credentials in try await runScenario("aioapns_client", simulator, credentials) }
    }
}
