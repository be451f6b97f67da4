import DispatcherStatus

/// `pushctl status REQUEST_ID`: where a send request stands, from PostgreSQL (docs/campaigns.md
/// "Request status"), as one line or `--json` (the same object as the dispatcher's
/// `GET /v1/requests/<id>`). Exit 5 when PostgreSQL knows no such request.
enum StatusCommand {
    static func run(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        try arguments.expectPositionals(atMost: 1)
        guard let requestID = arguments.positionals.first, !requestID.isEmpty else {
            throw CommandLineArguments.UsageError("a REQUEST_ID argument is required")
        }
        let report = try await TokenCommands.withDatabase(settings) { connection in
            try await RequestStatusReader.status(requestID: requestID, on: connection)
        }
        guard let report else {
            throw PushCtlError(.notFound, "no request \(requestID) in PostgreSQL (not consumed yet, never sent, or past its retention)")
        }
        print(arguments.flag("json") ? report.json : line(report))
    }

    /// One line: `request R COMPLETED (campaign): 10,000 notifications: 10,000 delivered, 0 rejected,
    /// 0 failed, 0 skipped`; `request R SCHEDULED (campaign) for 2026-12-01T11:00:00.000Z: not started`;
    /// `request R RUNNING (immediate): 2,000 notifications so far: …, 3 parked for a retry`; a
    /// recorded cancel on an open campaign adds `; cancel requested`.
    static func line(_ report: RequestStatusReport) -> String {
        let kind = report.isCampaign ? "campaign" : "immediate"
        var text = "request \(report.requestID) \(report.status.uppercased()) (\(kind))"
        let counts = report.counts
        switch report.state {
        case .scheduled:
            text += " for \(FeedbackLine.timestamp(report.sendAtMs)): not started"
        case .accepted:
            text += ": not started"
        case .running, .completed, .cancelled:
            let soFar = report.state == .running ? " so far" : ""
            text += ": \(ProgressBar.grouped(Int(counts.processed))) notifications\(soFar): "
                + "\(ProgressBar.grouped(Int(counts.delivered))) delivered, \(ProgressBar.grouped(Int(counts.rejected))) rejected, "
                + "\(ProgressBar.grouped(Int(counts.failed))) failed, \(ProgressBar.grouped(Int(counts.skipped))) skipped"
            if report.parked > 0 { text += ", \(ProgressBar.grouped(Int(report.parked))) parked for a retry" }
        }
        if report.cancelRequested, report.state.isOpen { text += "; cancel requested" }
        return text
    }
}
