import Kafka
import PushMessages
import Testing

@testable import PushCtlCore

@Suite struct SendRequestBuilderTests {
    func build(_ arguments: [String]) throws -> SendRequest {
        let command = try PushCtlCommand.resolve(["send"]).0
        return try SendRequestBuilder.build(try CommandLineArguments(arguments, options: command.options), now: 1_700_000_000_000) { path in
            guard path == "payload.json" else { throw CommandLineArguments.UsageError("no such file") }
            return #"{"aps":{"badge":3}}"#
        }
    }

    @Test func userTargetWithAnAlertBuiltFromTitleAndBody() throws {
        let request = try build(["--user", "u1", "--user", "u2", "--bundle", "com.x", "--title", "Hi \"you\"", "--body", "b", "--request-id", "r1"])
        #expect(request.requestID == "r1")
        #expect(request.createdAtMs == 1_700_000_000_000)
        guard case .userIDs(let users) = request.target else { Issue.record("not a user target"); return }
        #expect(users.userIDs == ["u1", "u2"])
        #expect(request.notification?.pushType == .alert)
        #expect(request.notification?.payload == #"{"aps":{"alert":{"title":"Hi \"you\"","body":"b"}}}"#)
    }

    @Test func tokensPayloadFileAndHeaders() throws {
        let request = try build([
            "--token", "ab,cd", "--bundle", "com.x", "--payload-file", "payload.json", "--push-type", "background",
            "--priority", "5", "--expiration", "0", "--collapse-id", "c", "--environment", "sandbox",
        ])
        guard case .deviceTokens(let tokens) = request.target else { Issue.record("not a token target"); return }
        #expect(tokens.deviceTokens == ["ab", "cd"])
        #expect(request.notification?.payload == #"{"aps":{"badge":3}}"#)
        #expect(request.notification?.pushType == .background)
        #expect(request.notification?.priority == 5)
        #expect(request.notification?.expiration == 0)
        #expect(request.notification?.environment == .sandbox)
        #expect(request.requestID.count == 36)
    }

    @Test func badSendsAreNamed() {
        func message(_ arguments: [String]) -> String {
            do {
                _ = try build(arguments)
                return ""
            } catch { return "\(error)" }
        }
        #expect(message(["--bundle", "b", "--payload", "{}"]).contains("a target is required"))
        #expect(message(["--user", "u", "--token", "t", "--bundle", "b", "--payload", "{}"]).contains("one kind of target"))
        #expect(message(["--user", "u", "--payload", "{}"]).contains("--bundle is required"))
        #expect(message(["--user", "u", "--bundle", "b"]).contains("a payload is required"))
        #expect(message(["--user", "u", "--bundle", "b", "--payload", "{nope"]).contains("--payload: the payload is not JSON"))
        #expect(message(["--user", "u", "--bundle", "b", "--payload", "[1]"]).contains("must be a JSON object"))
        #expect(message(["--user", "u", "--bundle", "b", "--payload", "{}", "--push-type", "fax"]).contains("--push-type"))
        #expect(message(["--user", "u", "--bundle", "b", "--payload", "{}", "--priority", "7"]).contains("--priority"))
        #expect(message(["--user", "u", "--bundle", "b", "--payload-file", "missing.json"]).contains("--payload-file: cannot read"))
    }

    @Test func progressBar() {
        let bar = ProgressBar(width: 10)
        #expect(bar.render(done: 4512, total: 10_000, elapsed: .seconds(2)) == "[####......]  4,512/10,000  45%  2,256/s")
        #expect(bar.render(done: 10_000, total: 10_000, elapsed: .seconds(4), details: "d 1") == "[##########]  10,000/10,000  100%  2,500/s  d 1")
        #expect(bar.render(done: 7, total: nil, elapsed: .zero) == "7 reports  0/s")
        #expect(ProgressBar.grouped(1_234_567) == "1,234,567")
        #expect(ProgressBar.grouped(999) == "999")
    }

    @Test func redrivePlan() {
        var letter = DeadLetter()
        letter.sourceTopic = "push.send-requests.v1"
        letter.originalKey = Array("r1".utf8)
        letter.originalValue = [1, 2, 3]
        var header = DeadLetter.Header()
        header.key = "content-type"
        header.value = Array("application/json".utf8)
        letter.originalHeaders = [header]
        #expect(RedrivePlan(letter, overrideTopic: nil) == .produce(
            topic: "push.send-requests.v1", key: Array("r1".utf8), value: [1, 2, 3],
            headers: [KafkaHeader(name: "content-type", value: "application/json")]))
        #expect(RedrivePlan(letter, overrideTopic: "other") != RedrivePlan(letter, overrideTopic: nil))
        letter.originalValueTruncated = true
        letter.originalValueSize = 2_000_000
        guard case .skip(let why) = RedrivePlan(letter, overrideTopic: nil) else { Issue.record("a cut original was re-driven"); return }
        #expect(why.contains("cut"))
        letter.originalValueTruncated = false
        letter.sourceTopic = ""
        guard case .skip = RedrivePlan(letter, overrideTopic: nil) else { Issue.record("no topic but re-driven"); return }
    }
}
