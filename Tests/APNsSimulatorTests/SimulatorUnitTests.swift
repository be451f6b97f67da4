import APNs
import Foundation
import HTTP2
import PushDomain
import ServiceCore
import Testing
@testable import APNsSimulator

private func * (text: String, count: Int) -> String { String(repeating: text, count: count) }

/// The pure parts: faults JSON, topic rules, certificate topics, generated ids, key lists.
@Suite struct SimulatorUnitTests {
    @Test func faultsJSONRoundTrip() throws {
        let text = """
            {"latency": {"distribution": "exponential", "min_ms": 1, "max_ms": 50, "mean_ms": 5, "share": 0.5},
             "status_shares": {"429": 0.1, "500": 0.2, "503": 0.3}, "reason_shares": {"Shutdown": 0.1},
             "token_rate_limit": {"max_pushes": 1, "window_ms": 1000},
             "goaway": {"after_streams": 7, "every_ms": 2000, "reason": "Shutdown", "error_code": 0},
             "drop_after_streams": 9, "unanswered_share": 0.25, "max_concurrent_streams": 10,
             "hung_tokens": {"share": 0.02, "tokens": ["\("AB" * 32)"]}, "hold": {"tokens": ["\("EF" * 32)"]},
             "max_concurrent_streams_schedule": [{"after_ms": 100, "value": 1}]}
            """
        let faults = try APNsSimulatorFaults(json: Array(text.utf8))
        #expect(faults.latency == .init(distribution: .exponential, minimum: .milliseconds(1), maximum: .milliseconds(50), mean: .milliseconds(5), share: 0.5))
        #expect(faults.statusShares == [429: 0.1, 500: 0.2, 503: 0.3])
        #expect(faults.reasonShares == [.shutdown: 0.1])
        #expect(faults.tokenRateLimit == .init(maxPushes: 1, window: .seconds(1)))
        #expect(faults.goAway == .init(afterStreams: 7, every: .seconds(2), reason: "Shutdown", errorCode: 0))
        #expect(faults.dropAfterStreams == 9 && faults.unansweredShare == 0.25 && faults.maxConcurrentStreams == 10)
        #expect(faults.maxConcurrentStreamsSchedule == [.init(after: .milliseconds(100), value: 1)])
        #expect(faults.hungTokens == .init(share: 0.02, tokens: ["ab" * 32]))
        #expect(faults.hold == .init(tokens: ["ef" * 32]))
        let again = try APNsSimulatorFaults(json: faults.jsonValue.serializedBytes)
        #expect(again == faults)
        #expect(try APNsSimulatorFaults(json: Array("{}".utf8)) == APNsSimulatorFaults())
    }

    @Test(arguments: [
        (#"{"latncy": {}}"#, "faults.latncy: unknown key"),
        (#"{"status_shares": {"404": 0.1}}"#, "keys are"),
        (#"{"status_shares": {"500": 0.7, "503": 0.7}}"#, "more than 1"),
        (#"{"unanswered_share": 2}"#, "faults.unanswered_share: expected a number in 0…1"),
        (#"{"goaway": {"after_streams": "3"}}"#, "faults.goaway.after_streams: expected an integer"),
        (#"{"token_rate_limit": {"max_pushes": 3}}"#, "max_pushes and window_ms are required"),
        (#"{"latency": {"min_ms": 5, "max_ms": 1}}"#, "max_ms is below min_ms"),
        (#"{"hung_tokens": {"tokens": ["xyz"]}}"#, "faults.hung_tokens.tokens[0]: expected a device token"),
        (#"{"hung_tokens": {"share": 1.5}}"#, "faults.hung_tokens.share: expected a number in 0…1"),
        (#"{"hold": {"tokens": ["xyz"]}}"#, "faults.hold.tokens[0]: expected a device token"),
        (#"{"hold": {"token": []}}"#, "faults.hold.token: unknown key"),
        ("[1]", "expected a JSON object"),
    ])
    func faultsJSONErrorsNameTheKey(json: String, message: String) {
        #expect {
            _ = try APNsSimulatorFaults(json: Array(json.utf8))
        } throws: { error in
            (error as? APNsSimulatorError)?.code == .invalidConfiguration && "\(error)".contains(message)
        }
    }

    /// A hung share picks the same tokens every time, close to the share; a listed token always hangs.
    @Test func hungTokensAreChosenPerTokenAndStable() {
        let fault = APNsSimulatorFaults.HungTokens(share: 0.02, tokens: ["CD" * 32])
        let tokens = (0..<20_000).map { String(format: "%08x", $0) + "ab" * 28 }
        let hung = tokens.filter(fault.isHung)
        #expect(hung.count > 300 && hung.count < 500, "about 2 % of 20,000: \(hung.count)")
        #expect(tokens.filter(fault.isHung) == hung)
        #expect(fault.isHung("cd" * 32))
        #expect(!APNsSimulatorFaults.HungTokens(share: 0).isHung(tokens[0]))
    }

    @Test func recordQueryParsesAndNamesWhatIsWrong() throws {
        #expect(try RecordQuery(query: nil) == RecordQuery())
        #expect(try RecordQuery(query: "") == RecordQuery())
        #expect(try RecordQuery(query: "device_token=ABcd&since_ms=17&limit=3")
            == RecordQuery(deviceToken: "abcd", sinceMilliseconds: 17, limit: 3))
        for (query, named) in [("limit=0", "limit"), ("limit=x", "limit"), ("since_ms=-1", "since_ms"),
                               ("device_token=", "device_token"), ("device_token=zz", "device_token"),
                               ("limit=1&limit=2", "limit"), ("token=ab", "token")] {
            #expect {
                _ = try RecordQuery(query: Substring(query))
            } throws: { error in
                (error as? APNsSimulatorError)?.message.contains(named) == true
            }
        }
    }

    @Test func recordQueryKeepsTheNewestMatchesOldestFirst() {
        func record(_ token: String, at ms: Int64) -> APNsSimulatorRecord {
            APNsSimulatorRecord(environment: .sandbox, connectionID: 1, streamID: 1, receivedAtMilliseconds: ms, method: "POST",
                                path: "/3/device/\(token)", headers: [], body: [])
        }
        let records = [record("aa", at: 1), record("bb", at: 2), record("aa", at: 3), record("aa", at: 4)]
        #expect(RecordQuery(deviceToken: "aa").apply(to: records).map(\.receivedAtMilliseconds) == [1, 3, 4])
        #expect(RecordQuery(deviceToken: "aa", limit: 2).apply(to: records).map(\.receivedAtMilliseconds) == [3, 4])
        #expect(RecordQuery(sinceMilliseconds: 2).apply(to: records).map(\.receivedAtMilliseconds) == [2, 3, 4])
        #expect(RecordQuery(limit: 10).apply(to: records).count == 4)
        #expect(RecordQuery(deviceToken: "a").apply(to: records).isEmpty, "a prefix of a token is not the token")
    }

    @Test func topicRules() {
        #expect(SimulatorState.isWellFormedTopic("com.example.app-1_x"))
        for bad in ["", "com example", "com/example", ".com.example", "com.example.", "ünïcode"] {
            #expect(!SimulatorState.isWellFormedTopic(bad), "\(bad)")
        }
        #expect(SimulatorState.impliedPushType("com.example.app") == .alert)
        #expect(SimulatorState.impliedPushType("com.example.app.voip") == .voip)
        #expect(SimulatorState.impliedPushType("com.example.app.voip-ptt") == .pushtotalk)
        #expect(SimulatorState.impliedPushType("com.example.app.pushkit.fileprovider") == .fileprovider)
        #expect(SimulatorState.impliedPushType(".voip") == .alert)
        #expect(SimulatorState.topic("com.example.app.push-type.liveactivity", suits: .liveactivity))
        #expect(!SimulatorState.topic("com.example.app", suits: .liveactivity))
        #expect(!SimulatorState.topic("com.example.app.voip", suits: .alert))
        #expect(SimulatorState.topic("com.example.app", suits: .background))
        #expect(SimulatorState.topic("anything.voip", suits: .mdm))
    }

    @Test func canonicalHexTokenFastPathAgreesWithDeviceToken() {
        for text in ["ab" * 32, "ab" * 256, "ab" * 257, "ab" * 31, "AB" * 32, "a" * 65, "zz" * 32, "", "<" + "ab" * 32 + ">"] {
            let fast = SimulatorState.isCanonicalHexToken(Substring(text))
            let slow = (try? DeviceToken(validating: text))?.hex == text
            #expect(fast == slow, "\(text)")
        }
    }

    @Test func bearerPrefix() {
        #expect(SimulatorState.hasBearerPrefix("bearer x"))
        #expect(SimulatorState.hasBearerPrefix("Bearer x"))
        #expect(!SimulatorState.hasBearerPrefix("bearer "))
        #expect(!SimulatorState.hasBearerPrefix("bearerx"))
        #expect(!SimulatorState.hasBearerPrefix("basic abc"))
        #expect(!SimulatorState.hasBearerPrefix(""))
    }

    @Test func generatedAPNsIDsAreCanonicalVersion4UUIDs() {
        var rng = SplitMix64(seed: 42)
        var seen = Set<String>()
        for _ in 0..<1000 {
            let id = rng.uuidString()
            #expect(APNsIDSyntax.isValid(id), "\(id)")
            #expect(id == id.lowercased())
            let utf8 = Array(id.utf8)
            #expect(utf8[14] == UInt8(ascii: "4"))
            #expect([UInt8(ascii: "8"), UInt8(ascii: "9"), UInt8(ascii: "a"), UInt8(ascii: "b")].contains(utf8[19]))
            #expect((try? APNsID(validating: id))?.uuidString == id, "the APNs module agrees")
            seen.insert(id)
        }
        #expect(seen.count == 1000)
        #expect(!APNsIDSyntax.isValid("123e4567-e89b-12d3-a456-42661417400g"))
        #expect(!APNsIDSyntax.isValid("123e4567e89b-12d3-a456-426614174000-"))
        #expect(APNsIDSyntax.isValid("123E4567-E89B-12D3-A456-426614174000"))
    }

    @Test func certificateTopicsFromAppleExtension() async throws {
        let credentials = try await Credentials.shared.value
        let (status, output) = try await run(["openssl", "x509", "-in", credentials.path("client-multi.pem"), "-outform", "DER",
                                              "-out", credentials.path("client-multi.der")])
        try #require(status == 0, "\(output)")
        let der = try [UInt8](Data(contentsOf: URL(fileURLWithPath: credentials.path("client-multi.der"))))
        #expect(APNsCertificateCredentials.topics(inCertificateDER: der) == ["com.example.app", "com.example.app.voip"])
        #expect(APNsCertificateCredentials.topics(inCertificateDER: Array(der.prefix(200))) == [])
        #expect(APNsCertificateCredentials.topics(inCertificateDER: []) == [])
    }

    @Test func trustedKeyListParsesEnvironmentAndTopicSuffixes() async throws {
        let credentials = try await Credentials.shared.value
        let keys = try credentials.trustedKeys()
        #expect(keys.map(\.keyID) == ["KEY0000001", "KEY0000002", "KEY0000003", "KEY0000004"])
        #expect(keys.map(\.environment) == [nil, nil, .production, .sandbox])
        #expect(keys.map(\.topics) == [nil, nil, nil, ["com.example.app", "com.example.scoped"]])
        #expect(keys.allSatisfy { $0.publicKeyPEM.contains("BEGIN PUBLIC KEY") })
        let topicsOnly = try APNsSimulator.TrustedKey.parseList("KEY:TEAM:\(credentials.path("key4.pub.pem")):topics=com.a")
        #expect(topicsOnly.map(\.topics) == [["com.a"]] && topicsOnly.map(\.environment) == [nil])
        #expect(throws: APNsSimulatorError.self) { try APNsSimulator.TrustedKey.parseList("KEY:TEAM") }
        #expect(throws: APNsSimulatorError.self) { try APNsSimulator.TrustedKey.parseList("KEY:TEAM:/nonexistent.pem") }
        #expect(throws: APNsSimulatorError.self) { try APNsSimulator.TrustedKey.parseList("KEY:TEAM:\(credentials.path("key4.pub.pem")):topics=") }
    }

    @Test func configFileErrorsNameTheEntry() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("apns-sim-bad-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        var configuration = APNsSimulator.Configuration(certificateChainFile: "", privateKeyFile: "", trustedKeys: [])
        try #"{"tokens": [{"token": "ab", "environment": "staging"}]}"#.write(to: file, atomically: true, encoding: .utf8)
        #expect { try configuration.apply(configFile: file.path) } throws: { "\($0)".contains("config.tokens[0].environment") }
        #expect { try configuration.apply(configFile: "/nonexistent.json") } throws: { "\($0)".contains("cannot be read") }
    }

    @Test func inProcessControls() async throws {
        try await withSimulator { simulator, _ in
            #expect(simulator.faults == APNsSimulatorFaults())
            var faults = APNsSimulatorFaults()
            faults.unansweredShare = 0.5
            simulator.setFaults(faults)
            #expect(simulator.faults.unansweredShare == 0.5)
            #expect(throws: APNsSimulatorError.self) {
                try simulator.register(.init(token: "nothex", environment: .sandbox))
            }
            simulator.reset()
            #expect(simulator.faults == APNsSimulatorFaults(), "reset restores the start faults")
            #expect(simulator.port(for: .sandbox) == simulator.sandboxPort)
        }
    }
}
