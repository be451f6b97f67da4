extension Duration {
    /// This duration in whole milliseconds, rounded down (for protocol fields, logs and C APIs that
    /// take milliseconds).
    /// Saturates at `Int64.min`/`Int64.max` (a duration of more than 292 million years) instead of
    /// trapping.
    public var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000_000_000)
        if overflow2 { return seconds < 0 ? .min : .max }
        return sum
    }
}

extension Duration {
    /// This duration in seconds as a floating-point number (for rates, token buckets, Prometheus
    /// histograms and `TimeInterval` APIs).
    public var inSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
