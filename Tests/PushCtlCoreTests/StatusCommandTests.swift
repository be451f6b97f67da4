import DispatcherStatus
import Testing

@testable import PushCtlCore

/// `pushctl status`: the line printed for each state (the JSON is `RequestStatusReport.json`).
@Suite struct StatusCommandTests {
    static func report(_ state: CampaignState, campaign: Bool = true) -> RequestStatusReport {
        var report = RequestStatusReport(requestID: "r-1", state: state, isCampaign: campaign)
        var counts = CampaignCounts()
        counts.processed = 12_345
        counts.delivered = 12_000
        counts.rejected = 300
        counts.failed = 40
        counts.skipped = 5
        report.counts = counts
        return report
    }

    @Test func eachStateHasItsLine() {
        var scheduled = Self.report(.scheduled)
        scheduled.counts = CampaignCounts()
        scheduled.sendAtMs = 1_796_000_000_000
        #expect(StatusCommand.line(scheduled) == "request r-1 SCHEDULED (campaign) for 2026-11-30T00:53:20.000Z: not started")
        #expect(StatusCommand.line(Self.report(.accepted)) == "request r-1 ACCEPTED (campaign): not started")
        #expect(StatusCommand.line(Self.report(.completed, campaign: false))
            == "request r-1 COMPLETED (immediate): 12,345 notifications: 12,000 delivered, 300 rejected, 40 failed, 5 skipped")
        var running = Self.report(.running, campaign: false)
        running.parked = 1_200
        running.cancelRequested = true
        #expect(StatusCommand.line(running)
            == "request r-1 RUNNING (immediate): 12,345 notifications so far: 12,000 delivered, 300 rejected, 40 failed, 5 skipped, 1,200 parked for a retry; cancel requested")
        var cancelled = Self.report(.cancelled)
        cancelled.cancelRequested = true
        #expect(StatusCommand.line(cancelled)
            == "request r-1 CANCELLED (campaign): 12,345 notifications: 12,000 delivered, 300 rejected, 40 failed, 5 skipped")
    }

    @Test func theCommandIsListedWithItsExitStatus() throws {
        let (command, rest) = try PushCtlCommand.resolve(["status", "r-1", "--json"])
        #expect(command.name == "status" && rest == ["r-1", "--json"])
        #expect(command.help.contains("GET /v1/requests/REQUEST_ID"))
        #expect(PushCtlExitCode.table.contains("5  token show: no such token; status: no such request"))
    }
}
