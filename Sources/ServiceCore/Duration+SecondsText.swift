extension Duration {
    /// Seconds with one decimal, e.g. `2.5 s`, for probe bodies and logs.
    public var secondsText: String {
        let tenths = (wholeMilliseconds + 50) / 100
        return "\(tenths / 10).\(abs(tenths % 10)) s"
    }
}
