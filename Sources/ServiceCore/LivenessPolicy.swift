/// Decides `/healthz` from the process's heartbeats: the process is alive unless one of its loops
/// (the Kafka poll thread, an HTTP/2 event loop) has not come round for longer than `maxBeatAge`.
/// A pure decision: the caller passes the ages (`Heartbeats.snapshot()`).
public struct LivenessPolicy: Sendable, Equatable {
    /// The longest a loop may go without a beat. Default 30 s.
    public var maxBeatAge: Duration

    /// - Parameter maxBeatAge: see the property.
    public init(maxBeatAge: Duration = .seconds(30)) { self.maxBeatAge = maxBeatAge }

    /// The liveness report for `heartbeats` (name and age of each); loops sharing a name are numbered
    /// in order (`http2-server-0 #1`, `http2-server-0 #2`).
    public func evaluate(_ heartbeats: [(name: String, age: Duration)]) -> ProbeReport {
        if heartbeats.isEmpty { return ProbeReport(checks: [.init("process", .ok, "running (no loop heartbeats registered)")]) }
        // Loops of one kind share a name (one per connection or listener thread): number them, so
        // that each line names one loop.
        var total: [String: Int] = [:]
        for beat in heartbeats { total[beat.name, default: 0] += 1 }
        var seen: [String: Int] = [:]
        return ProbeReport(checks: heartbeats.map { beat in
            seen[beat.name, default: 0] += 1
            let name = total[beat.name, default: 0] > 1 ? "\(beat.name) #\(seen[beat.name, default: 0])" : beat.name
            return beat.age > maxBeatAge
                ? .init("heartbeat \(name)", .failing, "has not come round for \(beat.age.secondsText) (limit \(maxBeatAge.secondsText))")
                : .init("heartbeat \(name)", .ok, "came round \(beat.age.secondsText) ago")
        })
    }
}
