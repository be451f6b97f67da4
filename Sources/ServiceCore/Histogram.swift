import Synchronization

/// A family of distributions with fixed cumulative buckets.
public final class Histogram: MetricFamily {
    /// Upper bounds in seconds suited to network latencies: 0.5 ms … 30 s.
    public static let defaultBuckets: [Double] = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
    ]

    private struct Series {
        var counts: [UInt64]  // per bucket, not cumulative; the last slot is +Inf
        var sum: Double = 0
        var count: UInt64 = 0
    }

    let name: String
    let help: String
    let labelNames: [String]
    let buckets: [Double]
    private let limits: LabelLimits
    private let series: Mutex<SeriesTable<Series>>

    init(name: String, help: String, labelNames: [String], buckets: [Double], limits: LabelLimits) {
        MetricName.check(name, labelNames + ["le"])
        precondition(!buckets.isEmpty && zip(buckets, buckets.dropFirst()).allSatisfy { $0 < $1 },
                     "histogram \(name): buckets must be ascending")
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.buckets = buckets
        self.limits = limits
        self.series = Mutex(SeriesTable(labelCount: labelNames.count))
    }

    /// Counts one observation (seconds for durations) into the series named by `labels`.
    public func observe(_ value: Double, labels: [String] = []) {
        precondition(labels.count == labelNames.count, "histogram \(name) takes labels \(labelNames)")
        let slot = buckets.firstIndex { value <= $0 } ?? buckets.count
        let width = buckets.count + 1
        let maximum = limits.maximum.load(ordering: .relaxed)
        let overflowed = series.withLock { table in
            table.update(labels, maximum: maximum, make: { Series(counts: Array(repeating: 0, count: width)) }) { entry in
                entry.counts[slot] += 1
                entry.sum += value
                entry.count += 1
            }
        }
        if !overflowed.isEmpty { limits.record(overflowed, family: name, labelNames: labelNames) }
    }

    func value(labels: [String]) -> Double? { series.withLock { $0.series[labels].map { Double($0.count) } } }

    var seriesCount: Int { series.withLock { $0.series.count } }

    func render(into text: inout String) {
        let all = series.withLock { $0.series }
        MetricText.header(name: name, help: help, type: "histogram", into: &text)
        for (labels, entry) in all.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            var cumulative: UInt64 = 0
            for (index, bound) in (buckets + [Double.infinity]).enumerated() {
                cumulative += entry.counts[index]
                MetricText.sample(name: name + "_bucket", labelNames: labelNames + ["le"],
                                  labels: labels + [MetricText.number(bound)], value: Double(cumulative), into: &text)
            }
            MetricText.sample(name: name + "_sum", labelNames: labelNames, labels: labels, value: entry.sum, into: &text)
            MetricText.sample(name: name + "_count", labelNames: labelNames, labels: labels,
                              value: Double(entry.count), into: &text)
        }
    }
}
