import ServiceCore

/// How the dispatcher runs campaigns and scheduled sends (docs/campaigns.md), from the environment.
public struct CampaignSettings: Sendable {
    /// Whether this process runs campaigns (`PUSH_CAMPAIGN_RUNNER`, default true). Rows are written
    /// by every dispatcher either way.
    public var runnerEnabled = true
    /// Campaigns run at once by this process (`PUSH_CAMPAIGN_CONCURRENCY`, default 2).
    public var concurrency = 2
    /// Campaign notifications in flight at once, across this process's campaigns: the campaign lane,
    /// apart from the transactional budget (`PUSH_CAMPAIGN_MAX_IN_FLIGHT`, default 1,000, the
    /// transactional budget's default). A permit is held from the send until the outcome is recorded,
    /// so it is also a holder's crash window. With 200, a campaign sent at 0.78 of a fan-out of the
    /// same size, with 500 at 0.88 (`bench-campaign`, 100,000 tokens).
    public var maxInFlight = 1_000
    /// Audience rows read per page and checkpoint (`PUSH_CAMPAIGN_PAGE_SIZE`, default 1,000).
    public var pageSize = 1_000
    /// Pages of one campaign starting their sends at once (`PUSH_CAMPAIGN_PAGES_IN_FLIGHT`, default
    /// 3): the next page is read once the oldest of them started its last send, whatever Apple's
    /// answers take; the checkpoint only moves over pages that finished in order.
    public var pagesInFlight = 3
    /// Pages of one campaign issued and not finished, the checkpoint waiting for the oldest
    /// (`PUSH_CAMPAIGN_MAX_UNFINISHED_PAGES`, default 1,000). A page whose sends all started keeps
    /// only its notifications still outstanding (about 30 KB a page with one unanswered token,
    /// measured); this bounds that memory and how far the campaign runs ahead of its checkpoint (what
    /// a resumed holder reads again) while a few tokens are answered late.
    public var maxUnfinishedPages = 1_000
    /// The lease's length (`PUSH_CAMPAIGN_LEASE_MS`, default 15 s): how long a dead holder keeps a campaign.
    public var lease: Duration = .seconds(15)
    /// How often an idle runner looks for due campaigns (`PUSH_CAMPAIGN_POLL_MS`, default 200 ms).
    public var pollInterval: Duration = .milliseconds(200)
    /// How often a holder renews its lease and reads the cancel flag (`PUSH_CAMPAIGN_CANCEL_CHECK_MS`,
    /// default 200 ms; never more than a third of the lease).
    public var cancelCheckInterval: Duration = .milliseconds(200)
    /// Interval of `CampaignProgress` events (`PUSH_CAMPAIGN_PROGRESS_INTERVAL_MS`, default 5 s).
    public var progressInterval: Duration = .seconds(5)
    /// Default sends per second per app (`PUSH_CAMPAIGN_RATE_PER_APP`, 0 = unlimited, the default).
    public var defaultRatePerApp: Double = 0
    /// Sends per second by bundle id (`PUSH_CAMPAIGN_RATE_LIMITS=com.a=5000,com.b=100`).
    public var rateLimits: [String: Double] = [:]

    /// Nice value of the threads campaign pages run on while transactional work flows
    /// (`PUSH_CAMPAIGN_NICE`, 0 to 19, default 10; 0 runs them on Swift's cooperative pool with the
    /// transactional work). Campaigns then take the CPU that transactional requests leave
    /// (docs/campaigns.md "The CPU").
    public var niceness: Int32 = 10
    /// How long after the last transactional notification a campaign page still starts on the
    /// lowered threads (`PUSH_CAMPAIGN_NICE_HOLD_MS`, default 1 s; 0: always, whatever flows). A page
    /// starting later runs on the cooperative pool: a campaign alone on its replica is not slowed
    /// by a priority below the services that serve it.
    public var niceHold: Duration = .seconds(1)

    public init() {}

    /// Reads the `PUSH_CAMPAIGN_*` variables.
    /// - Throws: `EnvironmentConfig.Error` naming the bad variable (recorded instead, and every other
    ///   variable still read, when `env` collects errors).
    public static func fromEnvironment(_ env: EnvironmentConfig) throws -> CampaignSettings {
        var settings = CampaignSettings()
        settings.runnerEnabled = try env.bool("PUSH_CAMPAIGN_RUNNER", default: settings.runnerEnabled)
        settings.concurrency = try env.int("PUSH_CAMPAIGN_CONCURRENCY", default: settings.concurrency, in: 1...1_000)
        settings.maxInFlight = try env.int("PUSH_CAMPAIGN_MAX_IN_FLIGHT", default: settings.maxInFlight, in: 1...100_000)
        settings.pageSize = try env.int("PUSH_CAMPAIGN_PAGE_SIZE", default: settings.pageSize, in: 1...100_000)
        settings.pagesInFlight = try env.int("PUSH_CAMPAIGN_PAGES_IN_FLIGHT", default: settings.pagesInFlight, in: 1...64)
        settings.maxUnfinishedPages = try env.int(
            "PUSH_CAMPAIGN_MAX_UNFINISHED_PAGES", default: settings.maxUnfinishedPages, in: 1...100_000)
        settings.niceness = Int32(try env.int("PUSH_CAMPAIGN_NICE", default: Int(settings.niceness), in: 0...19))
        settings.niceHold = try env.milliseconds("PUSH_CAMPAIGN_NICE_HOLD_MS", default: settings.niceHold)
        settings.lease = try env.milliseconds("PUSH_CAMPAIGN_LEASE_MS", default: settings.lease)
        settings.pollInterval = try env.milliseconds("PUSH_CAMPAIGN_POLL_MS", default: settings.pollInterval)
        settings.cancelCheckInterval = try env.milliseconds("PUSH_CAMPAIGN_CANCEL_CHECK_MS", default: settings.cancelCheckInterval)
        settings.progressInterval = try env.milliseconds("PUSH_CAMPAIGN_PROGRESS_INTERVAL_MS", default: settings.progressInterval)
        for (name, value) in [("PUSH_CAMPAIGN_LEASE_MS", settings.lease), ("PUSH_CAMPAIGN_POLL_MS", settings.pollInterval),
                              ("PUSH_CAMPAIGN_CANCEL_CHECK_MS", settings.cancelCheckInterval),
                              ("PUSH_CAMPAIGN_PROGRESS_INTERVAL_MS", settings.progressInterval)] where value <= .zero {
            try env.fail(name, "must be positive")
        }
        if let text = env.string("PUSH_CAMPAIGN_RATE_PER_APP") {
            if let rate = Double(text), AppRateLimiter.isAcceptedRate(rate) {
                settings.defaultRatePerApp = rate
            } else {
                try env.fail("PUSH_CAMPAIGN_RATE_PER_APP", "expected sends per second, 0 (unlimited) or 0.001 to 1e9, got \"\(text)\"")
            }
        }
        if let text = env.string("PUSH_CAMPAIGN_RATE_LIMITS") {
            do {
                settings.rateLimits = try AppRateLimiter.parseLimits(text)
            } catch {
                try env.fail("PUSH_CAMPAIGN_RATE_LIMITS", error.description)
            }
        }
        return settings
    }
}
