extension Duration {
    /// This duration in whole milliseconds, rounded down (for protocol fields, logs and C APIs that
    /// take milliseconds).
    public var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
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
