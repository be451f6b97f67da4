import Synchronization

/// A family of monotonically increasing counts, one series per label-value combination.
public final class Counter: MetricFamily {
    let name: String
    let help: String
    let labelNames: [String]
    private let limits: LabelLimits
    private let series: Mutex<SeriesTable<Double>>

    init(name: String, help: String, labelNames: [String], limits: LabelLimits) {
        MetricName.check(name, labelNames)
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.limits = limits
        self.series = Mutex(SeriesTable(labelCount: labelNames.count))
    }

    /// Adds `amount` (≥ 0) to the series named by `labels` (positional, one value per label name;
    /// a value beyond the registry's `maximumLabelValues` for its label counts as `other`).
    public func increment(by amount: Double = 1, labels: [String] = []) {
        precondition(amount >= 0, "counter \(name) can only increase")
        precondition(labels.count == labelNames.count, "counter \(name) takes labels \(labelNames)")
        let maximum = limits.maximum.load(ordering: .relaxed)
        let overflowed = series.withLock { $0.update(labels, maximum: maximum, make: { 0 }) { $0 += amount } }
        if !overflowed.isEmpty { limits.record(overflowed, family: name, labelNames: labelNames) }
    }

    func value(labels: [String]) -> Double? { series.withLock { $0.series[labels] } }

    var seriesCount: Int { series.withLock { $0.series.count } }

    func render(into text: inout String) {
        let samples = series.withLock { $0.series }.map { MetricSample(labels: $0.key, value: $0.value) }
        MetricText.family(name: name, help: help, type: "counter", labelNames: labelNames,
                          samples: samples, into: &text)
    }
}
