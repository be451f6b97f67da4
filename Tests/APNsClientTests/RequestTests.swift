import APNs
import APNsSimulator
import Foundation
import HTTP2
import ProtobufCodec
import PushDomain
import ServiceCore
import Testing

/// Every push type with its topic and headers, the issue's validation examples, certificate auth
/// (PEM, PKCS#12, MDM) and several apps and teams in one client, against the simulator over TLS.
@Suite(.serialized, .timeLimit(.minutes(1))) struct RequestTests {
    static let payloads: [APNsPushType: String] = [
        .alert: #"{"aps":{"alert":{"title":"Hi","body":"there"}}}"#,
        .background: #"{"aps":{"content-available":1}}"#,
        .voip: #"{"call":"42"}"#,
        .complication: #"{"aps":{},"score":3}"#,
        .fileprovider: #"{"container-identifier":"NSFileProviderRootContainerItemIdentifier"}"#,
        .location: #"{"aps":{}}"#,
        .liveactivity: #"{"aps":{"timestamp":1,"event":"update","content-state":{"score":1}}}"#,
        .pushtotalk: #"{"activeSpeaker":"Alex"}"#,
        .widgets: #"{"aps":{"content-changed":true}}"#,
        .controls: #"{"aps":{"content-changed":true}}"#,
        .mdm: #"{"mdm":"8F2B5A1C-0C6B-4E8F-9A1D-3E2B4C5D6E7F"}"#,
    ]

    @Test func everyTokenAuthPushTypeGoesOutWithItsTopicAndHeaders() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient()
            harness.shutdownAtEnd(client)
            let validator = APNsNotificationValidator()
            for (index, type) in APNsPushType.allCases.enumerated() where type != .mdm {
                let request = APNsRequest(
                    deviceToken: deviceToken(index), topic: type.topic(forBundleID: Credentials.app), pushType: type,
                    priority: type == .pushtotalk ? .immediately : nil, expiration: type == .pushtotalk ? .immediately : .omitted,
                    apnsID: APNsID.random(), payload: Array(Self.payloads[type]!.utf8))
                try validator.validate(request)
                let response = try await client.send(request, environment: .sandbox)
                #expect(response.status == 200, "\(type): \(response)")
                #expect(response.apnsID == request.apnsID?.uuidString)
                #expect(response.apnsUniqueID != nil, "sandbox answers carry apns-unique-id")
                #expect(response.attempts == 1)
            }
            let records = harness.simulator.receivedRequests()
            #expect(records.count == APNsPushType.allCases.count - 1)
            for record in records {
                let type = try #require(APNsPushType(rawValue: record.header("apns-push-type") ?? ""))
                #expect(record.header("apns-topic") == type.topic(forBundleID: Credentials.app))
                #expect(record.header("apns-priority") == (type == .background ? "5" : "10"))
                #expect(record.header("authorization")?.hasPrefix("bearer ") == true)
                #expect(record.status == 200)
            }
            let topics = Set(records.compactMap { $0.header("apns-topic") })
            #expect(topics.contains("com.example.app.voip-ptt"))
            #expect(topics.contains("com.example.app.location-query"))
            #expect(topics.contains("com.example.app.push-type.liveactivity"))
            #expect(topics.contains("com.example.app.pushkit.fileprovider"))
        }
    }

    @Test func expirationPriorityAndCollapseHeaders() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient()
            harness.shutdownAtEnd(client)
            let later = harness.clock.nowSeconds() + 3600
            var requests = [alert(1), alert(2, expiration: .immediately), alert(3, expiration: .at(secondsSinceEpoch: later))]
            requests[0].priority = .prioritizingDevicePower
            requests[1].priority = .consideringDevicePower
            requests[2].collapseID = "score-update"
            for request in requests {
                #expect(try await client.send(request, environment: .production).status == 200)
            }
            let records = harness.simulator.receivedRequests()
            #expect(records.map { $0.header("apns-expiration") } == [nil, "0", "\(later)"])
            #expect(records.map { $0.header("apns-priority") } == ["1", "5", "10"])
            #expect(records.map { $0.header("apns-collapse-id") } == [nil, nil, "score-update"])
        }
    }

    @Test func theIssuesValidationExamples() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient()
            harness.shutdownAtEnd(client)
            let validator = APNsNotificationValidator()
            func body(_ text: String) -> [UInt8] { Array(#"{"aps":{"alert":{"body":""#.utf8) + Array(text.utf8) + Array(#""}}}"#.utf8) }

            // 1,020 × 😀: 1,049 characters but 4,109 bytes: refused before sending, and APNs agrees.
            let emojiText = #"{"aps":{"alert":{"body":""# + String(repeating: "😀", count: 1020) + #""}}}"#
            #expect(emojiText.count == 1049)
            var emoji = alert(1)
            emoji.payload = body(String(repeating: "😀", count: 1020))
            #expect(emoji.payload.count == 4109)
            #expect(throws: APNsError.self) { try validator.validate(emoji) }
            do { try validator.validate(emoji) } catch let error as APNsError { #expect(error.reason == .payloadTooLarge) }
            let refusedBySimulator = try await client.send(emoji, environment: .production)
            #expect(refusedBySimulator.status == 413 && refusedBySimulator.reason == .payloadTooLarge)
            #expect(refusedBySimulator.action == .reject && refusedBySimulator.attempts == 1)

            // 4,067 × a: exactly 4,096 bytes: valid and delivered.
            var exact = alert(2)
            exact.payload = body(String(repeating: "a", count: 4067))
            #expect(exact.payload.count == 4096)
            try validator.validate(exact)
            #expect(try await client.send(exact, environment: .production).status == 200)

            // VoIP: 4,500 bytes sent, 5,121 refused.
            func voip(_ size: Int) -> APNsRequest {
                let frame = Array(#"{"call":""}"#.utf8)
                let payload = Array(#"{"call":""#.utf8) + Array(repeating: UInt8(ascii: "v"), count: size - frame.count) + Array(#""}"#.utf8)
                return APNsRequest(deviceToken: deviceToken(3), topic: "com.example.app.voip", pushType: .voip, payload: payload)
            }
            #expect(voip(4500).payload.count == 4500 && voip(5121).payload.count == 5121)
            try validator.validate(voip(4500))
            #expect(try await client.send(voip(4500), environment: .production).status == 200)
            do { try validator.validate(voip(5121)); Issue.record("5,121-byte VoIP payload accepted") } catch let error as APNsError {
                #expect(error.reason == .payloadTooLarge)
            }

            // Collapse id of 33 × é: 33 characters, 66 bytes: refused.
            var collapsed = alert(4)
            collapsed.collapseID = String(repeating: "é", count: 33)
            #expect(collapsed.collapseID!.utf8.count == 66)
            do { try validator.validate(collapsed); Issue.record("66-byte collapse id accepted") } catch let error as APNsError {
                #expect(error.reason == .badCollapseId)
            }
            #expect(try await client.send(collapsed, environment: .production).reason == .badCollapseId)

            // Background only at priority 5 (and 5 by default); payload must be a JSON object.
            var background = APNsRequest(deviceToken: deviceToken(5), topic: Credentials.app, pushType: .background,
                                         payload: Array(#"{"aps":{"content-available":1}}"#.utf8))
            try validator.validate(background)
            #expect(background.effectivePriority == .consideringDevicePower)
            background.priority = .immediately
            do { try validator.validate(background); Issue.record("background at 10 accepted") } catch let error as APNsError { #expect(error.reason == .badPriority) }
            #expect(try await client.send(background, environment: .production).reason == .badPriority)
            var notObject = alert(6)
            notObject.payload = Array(#"["aps"]"#.utf8)
            #expect(throws: APNsError.self) { try validator.validate(notObject) }
            var mismatch = alert(7)
            mismatch.payload = Array(#"{"aps":{"content-available":1}}"#.utf8)
            do { try validator.validate(mismatch); Issue.record("alert without alert/badge/sound accepted") } catch let error as APNsError {
                #expect(error.code == .payloadDoesNotMatchPushType)
            }
        }
    }

    @Test func certificateAuthWithPEMAndPKCS12AndMDM() async throws {
        try await withSimulator { harness in
            let credentials = harness.credentials
            let pem = try credentials.appCertificate()
            let p12 = try APNsCertificateCredentials(pkcs12File: credentials.path("app.p12"), password: "secret")
            #expect(p12.subjectUserID == Credentials.app && p12.notAfter == pem.notAfter)
            let mdm = try credentials.mdmCertificate()
            #expect(throws: APNsError.self) { try APNsCertificateCredentials(pkcs12File: credentials.path("app.p12"), password: "wrong") }

            for certificate in [pem, p12] {
                let client = APNsClient(
                    configuration: harness.configuration(), credentials: [Credentials.app: .certificate(certificate), Credentials.mdmTopic: .certificate(mdm)],
                    logger: Logger(label: "apns.test", logLevel: .error))
                for type in [APNsPushType.alert, .voip, .complication, .fileprovider] {
                    let request = APNsRequest(deviceToken: deviceToken(10), topic: type.topic(forBundleID: Credentials.app), pushType: type,
                                              payload: Array(Self.payloads[type]!.utf8))
                    let response = try await client.send(request, environment: .production)
                    #expect(response.status == 200, "\(type) with a certificate: \(response)")
                }
                let mdmPush = APNsRequest(deviceToken: deviceToken(11), topic: Credentials.mdmTopic, pushType: .mdm, payload: Array(Self.payloads[.mdm]!.utf8))
                try APNsNotificationValidator().validate(mdmPush)
                #expect(try await client.send(mdmPush, environment: .production).status == 200)
                // location needs token auth: the certificate connection is refused, not retried.
                let location = APNsRequest(deviceToken: deviceToken(12), topic: "com.example.app.location-query", pushType: .location, payload: Array(#"{"aps":{}}"#.utf8))
                let refused = try await client.send(location, environment: .production)
                #expect(refused.reason == .topicDisallowed && refused.attempts == 1)
                // The certificates expire in 2 days: inside the 30-day warning window.
                try await Task.sleep(for: .milliseconds(50))
                #expect(client.metrics["certificates_expiring"] >= 1)
                await client.shutdown()
            }
            let records = harness.simulator.receivedRequests()
            #expect(records.allSatisfy { $0.header("authorization") == nil && $0.certificateSubject != nil })
            #expect(records.contains { $0.certificateSubject?.contains(Credentials.mdmTopic) == true && $0.status == 200 })
        }
    }

    @Test func severalAppsAndTeamsInOneClient() async throws {
        try await withSimulator { harness in
            let team1 = try harness.credentials.tokens(key: 1, clock: harness.clock)
            let team2 = try harness.credentials.tokens(key: 2, clock: harness.clock)
            let client = APNsClient(
                configuration: harness.configuration(),
                credentials: ["com.example.app": .token(team1), "com.example.other": .token(team1), "org.second.app": .token(team2),
                              "com.example.cert": .certificate(try harness.credentials.appCertificate())],
                logger: Logger(label: "apns.test", logLevel: .error))
            harness.shutdownAtEnd(client)
            for (index, topic) in ["com.example.app", "org.second.app", "com.example.other", "org.second.app.voip"].enumerated() {
                let type: APNsPushType = topic.hasSuffix(".voip") ? .voip : .alert
                let request = APNsRequest(deviceToken: deviceToken(index), topic: topic, pushType: type, payload: Array(#"{"aps":{"alert":"x"}}"#.utf8))
                #expect(try await client.send(request, environment: .production).status == 200, "\(topic)")
            }
            let unknown = APNsRequest(deviceToken: deviceToken(9), topic: "net.nobody.app", pushType: .alert, payload: Array(#"{"aps":{"alert":"x"}}"#.utf8))
            await #expect(throws: APNsError.self) { _ = try await client.send(unknown, environment: .production) }
            let records = harness.simulator.receivedRequests()
            func issuer(_ record: APNsSimulatorRecord) -> String? { if case .string(let issuer)? = record.jwt?.claims["iss"] { issuer } else { nil } }
            let byTopic = Dictionary(records.map { ($0.header("apns-topic")!, (issuer($0), $0.connectionID)) }, uniquingKeysWith: { a, _ in a })
            #expect(byTopic["com.example.app"]?.0 == Credentials.team1)
            #expect(byTopic["com.example.other"]?.0 == Credentials.team1)
            #expect(byTopic["org.second.app"]?.0 == Credentials.team2)
            #expect(byTopic["org.second.app.voip"]?.0 == Credentials.team2)
            // One connection serves one team: team 1's two apps share one, team 2 has its own.
            #expect(byTopic["com.example.app"]?.1 == byTopic["com.example.other"]?.1)
            #expect(byTopic["com.example.app"]?.1 != byTopic["org.second.app"]?.1)
        }
    }
}
