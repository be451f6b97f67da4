import APNs
import DispatcherStatus
import Foundation
import Postgres
import PushDomain
import PushMessages
import ServiceCore
import Testing

@testable import DispatcherCore

/// The pure decisions of campaigns (docs/campaigns.md), without I/O.
struct CampaignDecisionTests {
    // MARK: Dotted versions

    @Test func versionsCompareAsIntegerTuples() throws {
        func v(_ text: String) throws -> DottedVersion { try #require(DottedVersion(text)) }
        #expect(try v("1.10") > v("1.9"))
        #expect(try v("1.2") == v("1.2.0"))
        #expect(try v("1.2.0.0") == v("1.2"))
        #expect(try v("2") > v("1.99.99"))
        #expect(try v("17.4.1") < v("17.5"))
        #expect(try v("0") == v("0.0"))
        #expect(try v("0") < v("0.0.1"))
        #expect(try v("010.1") == v("10.1"))
        #expect(try v("1.05") > v("1.4"))
        #expect(try v("1.2.0").int32Components == [1, 2])
        #expect(try v("0.0").int32Components == [])
        #expect(try v("999999999.1").int32Components == [999_999_999, 1])
    }

    @Test(arguments: ["", ".", "1.", ".1", "1..2", "1.2b", "v1", "-1", "1.2.3 ", "1234567890", "1,2", "１.２"])
    func notAVersion(_ text: String) {
        #expect(DottedVersion(text) == nil)
    }

    // MARK: Audience

    static func audienceRequest(_ filter: AudienceFilter? = nil, pushType: PushType = .alert, environment: Environment = .unspecified,
                                bundle: String = "com.example.app") -> SendRequest {
        var request = SendRequest()
        request.requestID = "campaign-1"
        var audience = AppAudience()
        audience.environment = environment
        audience.filter = filter
        request.target = .audience(audience)
        var notification = Notification()
        notification.bundleID = bundle
        notification.pushType = pushType
        notification.payload = pushType == .background ? #"{"aps":{"content-available":1}}"# : #"{"aps":{"alert":"hi"}}"#
        request.notification = notification
        return request
    }

    @Test func anAudienceIsNarrowedToThePushTypesTokenKind() throws {
        let alert = try AudienceQuery(Self.audienceRequest())
        #expect(alert.tokenKind == "standard" && alert.environment == nil && alert.bundleID == "com.example.app")
        let voip = try AudienceQuery(Self.audienceRequest(pushType: .voip, environment: .sandbox))
        #expect(voip.tokenKind == "voip" && voip.environment == .sandbox)
        let (sql, parameters) = voip.page(after: nil, limit: 500)
        #expect(sql == "SELECT \(TokenStore.columns) FROM device_tokens WHERE status = 'active' AND bundle_id = $1 AND token_kind = $2"
            + " AND device_token > $3 AND environment = $4 ORDER BY device_token LIMIT $5")
        #expect(parameters == [.string("com.example.app"), .string("voip"), .string(""), .string("sandbox"), .int(500)])
    }

    /// The audience's token kind is the one the dispatcher's APNs request for the notification needs,
    /// for every push type, and a Live Activity `event: start` reaches push-to-start tokens.
    @Test(arguments: APNsPushType.allCases)
    func theAudiencesTokenKindIsTheRequestsOne(_ type: APNsPushType) throws {
        for payload in [#"{"aps":{"alert":"hi"}}"#, #"{"aps":{"event":"start","timestamp":1}}"#] {
            var request = Self.audienceRequest(pushType: PushType(type))
            request.notification!.payload = payload
            let template = try NotificationTemplate(request.notification!, requestID: "r")
            let expected = template.request(for: NotificationTemplate.placeholderToken).requiredTokenKind
            #expect(try AudienceQuery(request).tokenKind == expected.rawValue, "\(type) \(payload)")
            if type == .liveactivity, payload.contains("start") { #expect(expected == .pushToStart) }
        }
    }

    @Test func aFilterCompilesToParameterizedConditions() throws {
        var filter = AudienceFilter()
        filter.locales = ["de_DE", "it'; DROP TABLE device_tokens; --"]
        filter.models = ["iPhone15,2"]
        filter.minAppVersion = "2.10"
        filter.belowAppVersion = "3"
        filter.minOsVersion = "17.0"
        filter.belowOsVersion = "18.1.0"
        filter.registeredSinceMs = 1_700_000_000_000
        let query = try AudienceQuery(Self.audienceRequest(filter))
        let (sql, parameters) = query.page(after: "ab", limit: 10)
        #expect(!sql.contains("DROP") && !sql.contains("de_DE") && !sql.contains("2.10"))
        #expect(sql.contains("attributes->>'locale' = ANY($4::text[])"))
        #expect(sql.contains("attributes->>'model' = ANY($5::text[])"))
        #expect(sql.contains("push_version_tuple(attributes->>'app_version') >= $6::int[]"))
        #expect(sql.contains("push_version_tuple(attributes->>'app_version') < $7::int[]"))
        #expect(sql.contains("push_version_tuple(attributes->>'os_version') >= $8::int[]"))
        #expect(sql.contains("push_version_tuple(attributes->>'os_version') < $9::int[]"))
        #expect(sql.contains("registered_at_ms >= $10") && sql.hasSuffix("LIMIT $11"))
        let expected: [PostgresValue?] = [
            .string("com.example.app"), .string("standard"), .string("ab"), .textArray(["de_DE", "it'; DROP TABLE device_tokens; --"]),
            .textArray(["iPhone15,2"]), .int32Array([2, 10]), .int32Array([3]), .int32Array([17]), .int32Array([18, 1]),
            .int64(1_700_000_000_000), .int(10),
        ]
        #expect(parameters == expected)
    }

    @Test func aFilterMatchesInSwiftByTheSameRules() throws {
        var filter = AudienceFilter()
        filter.locales = ["de_DE"]
        filter.minAppVersion = "2.10"
        filter.belowOsVersion = "18"
        filter.registeredSinceMs = 100
        let query = try AudienceQuery(Self.audienceRequest(filter, environment: .production))
        let good = ["locale": "de_DE", "app_version": "2.10.0", "os_version": "17.9"]
        #expect(query.matches(bundleID: "com.example.app", environment: .production, tokenKind: "standard", isActive: true,
                              attributes: good, registeredAtMs: 100))
        for (attributes, registered, environment, active) in [
            (good.merging(["locale": "en_US"]) { $1 }, Int64(100), APNsEnvironment.production, true),
            (good.merging(["app_version": "2.9.9"]) { $1 }, 100, .production, true),
            (good.merging(["app_version": "2.10-beta"]) { $1 }, 100, .production, true),
            (good.merging(["os_version": "18.0"]) { $1 }, 100, .production, true),
            (good.filter { $0.key != "app_version" }, 100, .production, true),
            (good, 99, .production, true),
            (good, 100, .sandbox, true),
            (good, 100, .production, false),
        ] {
            #expect(!query.matches(bundleID: "com.example.app", environment: environment, tokenKind: "standard", isActive: active,
                                   attributes: attributes, registeredAtMs: registered))
        }
    }

    @Test func aBadFilterIsRefusedNamingTheField() {
        var filter = AudienceFilter()
        filter.minOsVersion = "17.x"
        #expect(throws: InvalidFieldError.self) { try AudienceQuery(Self.audienceRequest(filter)) }
        do {
            try SendRequestDecoder.check(Self.audienceRequest(filter))
            Issue.record("accepted a bad version")
        } catch {
            #expect(error.description.hasPrefix("audience.filter.min_os_version:"))
        }
        filter = AudienceFilter()
        filter.locales = ["en_US", ""]
        do {
            try SendRequestDecoder.check(Self.audienceRequest(filter))
            Issue.record("accepted an empty locale")
        } catch {
            #expect(error.description == "audience.filter.locales[1]: is empty")
        }
        var other = Self.audienceRequest()
        if case .audience(var audience)? = other.target {
            audience.bundleID = "com.example.other"
            other.target = .audience(audience)
        }
        #expect(throws: SendRequestDecoder.Rejection.self) { try SendRequestDecoder.check(other) }
        #expect(throws: Never.self) { try SendRequestDecoder.check(Self.audienceRequest()) }
    }

    @Test func campaignsAreAudiencesAndFutureSendTimes() {
        var request = Self.audienceRequest()
        #expect(CampaignRunner.isCampaign(request, nowMs: 1_000))
        var tokens = DeviceTokens()
        tokens.deviceTokens = [String(repeating: "a", count: 64)]
        request.target = .deviceTokens(tokens)
        #expect(!CampaignRunner.isCampaign(request, nowMs: 1_000))
        request.sendAtMs = 1_000
        #expect(!CampaignRunner.isCampaign(request, nowMs: 1_000))
        request.sendAtMs = 1_001
        #expect(CampaignRunner.isCampaign(request, nowMs: 1_000))
    }

    // MARK: Pages in flight

    static func counts(delivered: Int64, rejected: Int64 = 0) -> CampaignCounts {
        var counts = CampaignCounts()
        for _ in 0..<delivered { counts.count(.delivered) }
        for _ in 0..<rejected { counts.count(.rejected) }
        return counts
    }

    @Test func theCheckpointOnlyMovesOverPagesFinishedInOrder() {
        var window = CampaignPageWindow(cursor: "0a", counts: Self.counts(delivered: 5))
        let first = window.issue(lastToken: "1f")
        let second = window.issue(lastToken: "2f")
        let third = window.issue(lastToken: "3f")
        #expect(window.unfinished == 3)
        // The second and third finish first: nothing may be written, the first page is still sending.
        #expect(window.finish(third, counts: Self.counts(delivered: 3)) == nil)
        #expect(window.finish(second, counts: Self.counts(delivered: 1, rejected: 1)) == nil)
        #expect(window.checkpoint == .init(cursor: "0a", counts: Self.counts(delivered: 5)))
        #expect(window.unfinished == 1 && window.pending == 3)
        // The first finishes: the checkpoint passes all three at once, with every page's counts.
        let moved = window.finish(first, counts: Self.counts(delivered: 2))
        #expect(moved == .init(cursor: "3f", counts: Self.counts(delivered: 11, rejected: 1)))
        #expect(window.pending == 0 && window.unfinished == 0)
        // A page finished twice, or one never issued, changes nothing.
        #expect(window.finish(first, counts: Self.counts(delivered: 100)) == nil)
        #expect(window.finish(99, counts: Self.counts(delivered: 100)) == nil)
        #expect(window.checkpoint.counts.processed == 12)
    }

    @Test func aPageThatNeverFinishesHoldsTheCheckpointBeforeIt() {
        var window = CampaignPageWindow(cursor: nil, counts: CampaignCounts())
        let first = window.issue(lastToken: "10")
        let second = window.issue(lastToken: "20")
        _ = window.issue(lastToken: "30")
        #expect(window.finish(first, counts: Self.counts(delivered: 1)) == .init(cursor: "10", counts: Self.counts(delivered: 1)))
        // The third page is abandoned (never finishes): the second finishing moves the checkpoint to
        // its own end only, so a resumed holder sends the third page again.
        #expect(window.finish(second, counts: Self.counts(delivered: 1)) == .init(cursor: "20", counts: Self.counts(delivered: 2)))
        #expect(window.pending == 1 && window.unfinished == 1)
    }

    @Test(arguments: 0..<20)
    func anyFinishingOrderEndsAtTheLastPageWithEveryCount(seed: Int) {
        var generator = SplitMix64(state: UInt64(seed))
        var window = CampaignPageWindow(cursor: nil, counts: CampaignCounts())
        let sequences = (0..<12).map { window.issue(lastToken: String(format: "%02x", $0)) }
        var cursors: [String?] = []
        for sequence in sequences.shuffled(using: &generator) {
            if let moved = window.finish(sequence, counts: Self.counts(delivered: 1)) { cursors.append(moved.cursor) }
        }
        #expect(window.checkpoint == .init(cursor: "0b", counts: Self.counts(delivered: 12)))
        // Every checkpoint written is later than the one before.
        #expect(cursors.compactMap { $0 } == cursors.compactMap { $0 }.sorted() && Set(cursors).count == cursors.count)
    }

    // MARK: Where a page runs

    /// docs/campaigns.md "The CPU": pages run lowered until the hold has passed since the last
    /// transactional admission; never when there was none.
    @Test func transactionalActivityLastsTheHoldAfterTheLastAdmission() {
        let start = ContinuousClock.now
        let activity = TransactionalActivity(hold: .seconds(1))
        func active(admittedAtMilliseconds admitted: Int?, askedAt ms: Int) -> Bool {
            activity.isActive(lastAdmission: admitted.map { start + .milliseconds($0) }, at: start + .milliseconds(ms))
        }
        #expect(!active(admittedAtMilliseconds: nil, askedAt: 0), "no transactional admission yet")
        #expect(active(admittedAtMilliseconds: 10, askedAt: 10))
        #expect(active(admittedAtMilliseconds: 10, askedAt: 1_009), "within the hold")
        #expect(!active(admittedAtMilliseconds: 10, askedAt: 1_010), "the hold passed without another admission")
        #expect(!active(admittedAtMilliseconds: 10, askedAt: 3_600_000), "traffic long ago is not activity")
    }

    @Test func aHoldOfZeroIsAlwaysActive() {
        let activity = TransactionalActivity(hold: .zero)
        #expect(activity.isActive(lastAdmission: nil, at: .now))
        #expect(activity.isActive(lastAdmission: .now - .seconds(3_600), at: .now))
    }

    // MARK: Token bucket

    @Test func theBucketAllowsItsBurstThenPacesAtItsRate() {
        var bucket = TokenBucket(ratePerSecond: 100, burst: 10, now: 0)
        for _ in 0..<10 { #expect(bucket.reserve(at: 0) == 0) }
        // The 11th waits a hundredth of a second, the 12th two, …: reservations queue up.
        #expect(abs(bucket.reserve(at: 0) - 0.01) < 1e-9)
        #expect(abs(bucket.reserve(at: 0) - 0.02) < 1e-9)
        // After the reserved ones are paid back, a second refills the whole burst and no more.
        #expect(bucket.reserve(at: 10) == 0)
        #expect(abs(bucket.tokens - 9) < 1e-9)
    }

    @Test func theBucketsLongRunRateIsItsSetting() {
        // 5,000 sends against a 1,000/s bucket (burst 1,000): the last may go at (5,000 - 1,000) / 1,000 s.
        var bucket = TokenBucket(ratePerSecond: 1_000, burst: 1_000, now: 0)
        var last = 0.0
        for _ in 0..<5_000 { last = bucket.reserve(at: 0) }
        #expect(abs(last - 4.0) < 1e-6)
    }

    @Test func rateLimitsParseAndNameTheBadPair() throws {
        #expect(try AppRateLimiter.parseLimits("com.a=5000, com.b=0.5,") == ["com.a": 5000, "com.b": 0.5])
        #expect(throws: CampaignConfigurationError.self) { try AppRateLimiter.parseLimits("com.a") }
        #expect(throws: CampaignConfigurationError.self) { try AppRateLimiter.parseLimits("com.a=-1") }
        let limiter = AppRateLimiter(defaultRate: 0, limits: ["com.a": 10])
        #expect(limiter.rate(for: "com.a") == 10 && limiter.rate(for: "com.b") == nil)
        #expect(AppRateLimiter(defaultRate: 50).rate(for: "com.b") == 50)
    }

    /// Every send of a campaign wanting to go at once (its start, or the lane freeing up after a
    /// stall): no one-second window carries more than 1.1 × the app's setting.
    @Test(arguments: [1.0, 50, 2_000, 5_000])
    func noSecondCarriesMoreThanATenthAboveTheSetting(rate: Double) {
        var bucket = TokenBucket(ratePerSecond: rate, burst: AppRateLimiter.burst(for: rate), now: 0)
        let sends = Int(rate * 5) + 10
        let times = (0..<sends).map { _ in bucket.reserve(at: 0) }
        for start in stride(from: 0.0, through: 4.0, by: 0.05) {
            let inWindow = times.filter { $0 >= start && $0 < start + 1 }.count
            #expect(Double(inWindow) <= (rate * 1.1).rounded(.up) + 1, "\(inWindow) sends in [\(start), \(start + 1)) at \(rate)/s")
        }
        // The long-run rate is the setting.
        #expect(abs(times[sends - 1] - Double(sends - 1) / rate) < 0.1 + 1 / rate)
    }

    // MARK: States and lease

    @Test func campaignStatesFollowTheDocumentedTransitions() {
        #expect(CampaignState.initial(sendAtMs: 2_000, nowMs: 1_000) == .scheduled)
        #expect(CampaignState.initial(sendAtMs: 0, nowMs: 1_000) == .accepted)
        #expect(CampaignState.scheduled.afterLeaseTaken == .running)
        #expect(CampaignState.completed.afterLeaseTaken == nil && CampaignState.cancelled.afterLeaseTaken == nil)
        #expect(CampaignState.final(cancelRequested: true) == .cancelled)
        #expect(CampaignState.running.allows(.completed) && !CampaignState.completed.allows(.running))
        #expect(!CampaignState.scheduled.allows(.completed))
        #expect(CampaignState.allCases.map(\.requestStatus) == [.accepted, .scheduled, .running, .completed, .cancelled])
    }

    @Test func aLeaseIsValidOnlyWhileConfirmedAndNeverAfterALostWrite() {
        let start = ContinuousClock.now
        var lease = CampaignLease(requestID: "r", owner: "a", generation: 3, duration: .seconds(10), confirmedAt: start)
        #expect(lease.isValid(at: start + .seconds(8)))
        #expect(!lease.isValid(at: start + .seconds(9)))  // a tenth of the lease is the margin
        #expect(!lease.renewalDue(at: start + .seconds(3)) && lease.renewalDue(at: start + .seconds(4)))
        lease.renewed(sentAt: start + .seconds(5))
        #expect(lease.isValid(at: start + .seconds(13)))
        lease.renewed(sentAt: start + .seconds(1))  // an older renewal's answer never moves it back
        #expect(lease.isValid(at: start + .seconds(13)))
        lease.markLost()
        #expect(!lease.isValid(at: start + .seconds(5)))
    }
}
