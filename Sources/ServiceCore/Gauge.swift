import Synchronization

/// A family of values that go up and down.
public final class Gauge: MetricFamily {
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

    /// Sets the series named by `labels` to `value` (a label value beyond the registry's bound:
    /// the `other` series).
    public func set(_ value: Double, labels: [String] = []) {
        update(labels) { $0 = value }
    }

    /// Adds `amount` to the series named by `labels`.
    public func increment(by amount: Double = 1, labels: [String] = []) {
        update(labels) { $0 += amount }
    }

    private func update(_ labels: [String], _ change: (inout Double) -> Void) {
        check(labels)
        let maximum = limits.maximum.load(ordering: .relaxed)
        let overflowed = series.withLock { $0.update(labels, maximum: maximum, make: { 0 }, change) }
        if !overflowed.isEmpty { limits.record(overflowed, family: name, labelNames: labelNames) }
    }

    /// Subtracts `amount` from the series named by `labels`.
    public func decrement(by amount: Double = 1, labels: [String] = []) {
        increment(by: -amount, labels: labels)
    }

    /// Drops the series named by `labels` (a partition no longer assigned, a connection gone).
    public func remove(labels: [String]) {
        _ = series.withLock { $0.series.removeValue(forKey: labels) }
    }

    private func check(_ labels: [String]) {
        precondition(labels.count == labelNames.count, "gauge \(name) takes labels \(labelNames)")
    }

    func value(labels: [String]) -> Double? { series.withLock { $0.series[labels] } }

    var seriesCount: Int { series.withLock { $0.series.count } }

    func render(into text: inout String) {
        let samples = series.withLock { $0.series }.map { MetricSample(labels: $0.key, value: $0.value) }
        MetricText.family(name: name, help: help, type: "gauge", labelNames: labelNames,
                          samples: samples, into: &text)
    }
}
