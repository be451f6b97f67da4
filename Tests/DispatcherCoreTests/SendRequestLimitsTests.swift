import Foundation
import Kafka
import ProtobufCodec
import PushMessages
import ServiceCore
import Testing

@testable import DispatcherCore

/// `PUSH_MAX_SEND_REQUEST_BYTES` and `PUSH_MAX_TOKENS_PER_REQUEST`: an oversized send request is
/// refused before or while it is decoded, with its own dead-letter reason, and a long token list is
/// never built first.
@Suite struct SendRequestLimitsTests {
    static let token = String(repeating: "5a", count: 32)

    static func record(_ value: [UInt8], contentType: String) -> KafkaMessage {
        KafkaMessage(topic: "t", partition: 0, offset: 1, key: Array("r-1".utf8), value: value,
                     headers: [KafkaHeader(name: "content-type", value: contentType)], timestamp: nil)
    }

    static func request(tokens: Int) -> SendRequest {
        RecordCheckTests.sendRequest { $0.target = .deviceTokens(DeviceTokens(deviceTokens: Array(repeating: token, count: tokens))) }
    }

    static func json(_ request: SendRequest) -> KafkaMessage { record(request.jsonUTF8Bytes(), contentType: "application/json") }
    static func protobuf(_ request: SendRequest) -> KafkaMessage { record(request.serializedBytes(), contentType: SendRequest.protobufContentType) }

    func rejection(_ message: KafkaMessage, _ limits: SendRequestDecoder.Limits) -> SendRequestDecoder.Rejection? {
        do {
            _ = try SendRequestDecoder.decode(message, limits: limits)
            return nil
        } catch {
            return error
        }
    }

    @Test func exactlyAtTheLimitsIsAccepted() throws {
        let limits = SendRequestDecoder.Limits(maxBytes: 1 << 20, maxTokens: 100)
        #expect(try SendRequestDecoder.decode(Self.protobuf(Self.request(tokens: 100)), limits: limits).requestID == "r-1")
        #expect(try SendRequestDecoder.decode(Self.json(Self.request(tokens: 100)), limits: limits).requestID == "r-1")
        let users = RecordCheckTests.sendRequest { $0.target = .userIDs(UserIds(userIDs: (0..<100).map { "u\($0)" })) }
        #expect(try SendRequestDecoder.decode(Self.protobuf(users), limits: limits).requestID == "r-1")
        let message = Self.protobuf(Self.request(tokens: 1))
        #expect(try SendRequestDecoder.decode(message, limits: .init(maxBytes: message.value.count, maxTokens: 1)).requestID == "r-1")
    }

    @Test func oneEntryMoreIsRefusedByTokenCount() {
        let limits = SendRequestDecoder.Limits(maxBytes: 1 << 20, maxTokens: 100)
        for message in [Self.protobuf(Self.request(tokens: 101)), Self.json(Self.request(tokens: 101))] {
            let refused = rejection(message, limits)
            #expect(refused?.reason == "too_many_tokens")
            #expect(refused?.description.contains("PUSH_MAX_TOKENS_PER_REQUEST") == true, "\(refused?.description ?? "")")
        }
        let users = RecordCheckTests.sendRequest { $0.target = .userIDs(UserIds(userIDs: (0..<101).map { "u\($0)" })) }
        #expect(rejection(Self.protobuf(users), limits)?.reason == "too_many_tokens")
        // The target field written twice merges (protobuf): the entries add up.
        var twice = Self.protobuf(Self.request(tokens: 60)).value
        twice += Self.request(tokens: 60).serializedBytes()
        #expect(rejection(Self.record(twice, contentType: SendRequest.protobufContentType), limits)?.reason == "too_many_tokens")
    }

    /// The refusal comes while reading the list, before its end: a record whose tail is malformed
    /// after the first entry past the limit is refused by count, not as undecodable (the whole list
    /// was never built; before, every entry was decoded first).
    @Test func theCountStopsDecodingBeforeTheListIsBuilt() throws {
        let limits = SendRequestDecoder.Limits(maxBytes: 1 << 20, maxTokens: 100)
        // Protobuf: field 2 (DeviceTokens) whose length claims 101 entries and one more that is cut.
        var list: [UInt8] = []
        for _ in 0..<101 { list += [0x0A, 64] + Array(Self.token.utf8) }
        list += [0x0A, 64, 0x35]  // an entry cut short
        var value: [UInt8] = [0x0A, 3] + Array("r-1".utf8) + [0x12]
        var length = list.count
        while length >= 0x80 { value.append(UInt8(length & 0x7F) | 0x80); length >>= 7 }
        value.append(UInt8(length))
        value += list
        #expect(rejection(Self.record(value, contentType: SendRequest.protobufContentType), limits)?.reason == "too_many_tokens")
        #expect(rejection(Self.record(value, contentType: SendRequest.protobufContentType), .init(maxBytes: 1 << 20, maxTokens: 1_000))?.reason == "invalid_send_request")
        // JSON: the array goes on into text that is not JSON.
        let json = #"{"requestId":"r-1","deviceTokens":{"deviceTokens":["# + (0..<101).map { _ in "\"\(Self.token)\"" }.joined(separator: ",") + ", not json"
        #expect(rejection(Self.record(Array(json.utf8), contentType: "application/json"), limits)?.reason == "too_many_tokens")
        #expect(rejection(Self.record(Array(json.utf8), contentType: "application/json"), .init(maxBytes: 1 << 20, maxTokens: 1_000))?.reason == "invalid_send_request")
    }

    @Test func aValueOverTheByteLimitIsRefusedUnread() {
        let message = Self.record([UInt8](repeating: 0xFF, count: 2_000), contentType: SendRequest.protobufContentType)
        let refused = rejection(message, .init(maxBytes: 1_999, maxTokens: 10))
        #expect(refused?.reason == "send_request_too_large")
        #expect(refused?.description.contains("2000 bytes") == true, "\(refused?.description ?? "")")
        #expect(rejection(message, .init(maxBytes: 2_000, maxTokens: 10))?.reason == "invalid_send_request")
        // A cancel request is bounded the same way.
        let cancel = Self.record([UInt8](repeating: 0x20, count: 2_000), contentType: "application/json; message=push.v1.CancelRequest")
        #expect(throws: SendRequestDecoder.Rejection.self) { try CampaignCancellations.cancelRequest(in: cancel, maxBytes: 1_999) }
    }

    /// The issue's case: a record within the byte limit that lists 1,000,000 tokens (66 MB of
    /// protobuf, allowed here by a byte limit of 100 MB) is refused by count after 10,001 entries.
    /// Prints the process's peak RSS growth while decoding (run alone for a clean figure).
    @Test func aMillionTokensAreRefusedWithoutBuildingTheList() throws {
        let value = Self.request(tokens: 1_000_000).serializedBytes()
        let message = Self.record(value, contentType: SendRequest.protobufContentType)
        let peakBefore = Self.peakResidentBytes()
        let started = ContinuousClock.now
        let refused = rejection(message, .init(maxBytes: 100_000_000, maxTokens: 10_000))
        let elapsed = ContinuousClock.now - started
        let peakAfter = Self.peakResidentBytes()
        #expect(refused?.reason == "too_many_tokens")
        // What the same record costs when the count allows it (the code before the limit did this).
        let unbounded = try SendRequestDecoder.decode(message, limits: .init(maxBytes: 100_000_000, maxTokens: 2_000_000))
        #expect(unbounded.requestID == "r-1")
        let peakUnbounded = Self.peakResidentBytes()
        print("1,000,000-token record (\(value.count) bytes): refused in \(elapsed); peak RSS \(peakBefore / 1_048_576) MiB -> \(peakAfter / 1_048_576) MiB; decoded without the limit: -> \(peakUnbounded / 1_048_576) MiB")
    }

    /// VmHWM of /proc/self/status, in bytes.
    static func peakResidentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
              let kib = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { return 0 }
        return kib * 1024
    }
}

/// Campaign rates (`PUSH_CAMPAIGN_RATE_PER_APP`, `PUSH_CAMPAIGN_RATE_LIMITS`): a rate no clock can wait
/// for is refused when the settings load, and no wait ever traps. Before, 1e-300 sends a second was
/// accepted and the second send of a campaign trapped converting a wait of 1e300 s to nanoseconds.
@Suite struct CampaignRateEdgeTests {
    @Test func ratesOutsideTheAcceptedRangeAreRefused() {
        for rate in [1e-300, 0.0009, 1.1e9, .infinity, -.infinity, .nan, -1] {
            #expect(!AppRateLimiter.isAcceptedRate(rate), "\(rate)")
        }
        for rate in [0, 0.001, 1, 1e9] { #expect(AppRateLimiter.isAcceptedRate(rate), "\(rate)") }
        #expect(throws: CampaignConfigurationError.self) { try AppRateLimiter.parseLimits("com.example.app=1e-300") }
    }

    @Test func waitsSaturateInsteadOfTrapping() {
        #expect(AppRateLimiter.sleepDuration(seconds: 1e300) == .seconds(86_400))
        #expect(AppRateLimiter.sleepDuration(seconds: .infinity) == .seconds(86_400))
        #expect(AppRateLimiter.sleepDuration(seconds: .nan) == .zero)
        #expect(AppRateLimiter.sleepDuration(seconds: -1) == .zero)
        #expect(AppRateLimiter.sleepDuration(seconds: 0.5) == .milliseconds(500))
    }
}
