import Foundation
import Synchronization

/// One value of a metric family read at scrape time: label values in the family's label order.
public struct MetricSample: Sendable, Equatable {
    /// Label values, positional: the same order as the family's `labelNames`.
    public var labels: [String]
    public var value: Double

    public init(labels: [String] = [], value: Double) {
        self.labels = labels
        self.value = value
    }
}

/// The process's metrics: counters, gauges and histograms with fixed buckets, each family identified
/// by its name, rendered synchronously in the Prometheus text exposition format 0.0.4.
///
/// Every operation takes a lock briefly and never suspends, so the admin port's threads can render
/// while Swift tasks and C callback threads count. Label values are positional (the order of the
/// family's `labelNames`); keep their cardinality bounded: never a device token, user id or request id.
///
/// Values a caller chooses (a bundle id from a request, a reason from a peer) are bounded here as
/// well: each label of a counter, gauge or histogram family keeps at most `maximumLabelValues`
/// distinct values (`LabelValueLimiter`); a series with a later value is counted under `other` for
/// that label, and every update so replaced is also counted in
/// `push_metrics_label_overflow_total{metric,label}`. Callback gauges are exempt (their samples come
/// from the process's own bounded state).
///
/// Registering a name a second time with the same type and label names returns the existing family
/// (components built twice in one process, as tests do, share it); a different type or different
/// label names for the same name is a programming error and stops the process.
public final class MetricsRegistry: Sendable {
    /// The registry every executable serves on its admin port.
    public static let shared = MetricsRegistry()

    /// The default of `maximumLabelValues` (`PUSH_METRICS_MAX_LABEL_VALUES`).
    public static let defaultMaximumLabelValues = 100
    /// The name of the family that counts series whose label value was replaced by `other`.
    public static let labelOverflowMetric = "push_metrics_label_overflow_total"

    private let families: Mutex<[String: any MetricFamily]>
    private let limits: LabelLimits

    /// A registry of its own (tests); production code counts into `shared`.
    /// - Parameter maximumLabelValues: distinct values kept per label of a family, ≥ 1.
    public init(maximumLabelValues: Int = MetricsRegistry.defaultMaximumLabelValues) {
        let overflow = Counter(
            name: Self.labelOverflowMetric,
            help: "Series whose label value was counted under \"other\" because the label of that metric already had the most distinct values allowed (PUSH_METRICS_MAX_LABEL_VALUES).",
            labelNames: ["metric", "label"], limits: LabelLimits(maximum: Int.max, overflow: nil))
        limits = LabelLimits(maximum: maximumLabelValues, overflow: overflow)
        families = Mutex([Self.labelOverflowMetric: overflow])
    }

    /// Distinct values kept per label of a family; later ones are counted under `other`. Applies to
    /// values first seen after it is set.
    public var maximumLabelValues: Int {
        get { limits.maximum.load(ordering: .relaxed) }
        set { limits.maximum.store(max(1, newValue), ordering: .relaxed) }
    }

    /// Reads `PUSH_METRICS_MAX_LABEL_VALUES` (default 100, 1…1,000,000): the value an executable
    /// gives `shared.maximumLabelValues` (the admin port's settings read it).
    /// - Throws: `EnvironmentConfig.Error` naming the variable when it is not such a number.
    public static func maximumLabelValues(environment env: EnvironmentConfig) throws -> Int {
        try env.int("PUSH_METRICS_MAX_LABEL_VALUES", default: defaultMaximumLabelValues, in: 1...1_000_000)
    }

    /// A monotonically increasing count. Name it with a `_total` suffix.
    @discardableResult
    public func counter(_ name: String, help: String, labelNames: [String] = []) -> Counter {
        register(name, make: { Counter(name: name, help: help, labelNames: labelNames, limits: limits) })
    }

    /// A value that goes up and down.
    @discardableResult
    public func gauge(_ name: String, help: String, labelNames: [String] = []) -> Gauge {
        register(name, make: { Gauge(name: name, help: help, labelNames: labelNames, limits: limits) })
    }

    /// A distribution counted into fixed cumulative buckets (upper bounds, ascending; `+Inf` is
    /// implicit). Durations in seconds.
    @discardableResult
    public func histogram(_ name: String, help: String, labelNames: [String] = [],
                          buckets: [Double] = Histogram.defaultBuckets) -> Histogram {
        register(name, make: { Histogram(name: name, help: help, labelNames: labelNames, buckets: buckets, limits: limits) })
    }

    /// A gauge whose samples are read when the registry renders (process memory, queue depths, lag).
    /// `collect` runs on the rendering thread while no registry lock is held; it must not suspend.
    @discardableResult
    public func gaugeCallback(_ name: String, help: String, labelNames: [String] = [],
                              collect: @escaping @Sendable () -> [MetricSample]) -> CallbackFamily {
        register(name, make: { CallbackFamily(name: name, help: help, labelNames: labelNames, kind: .gauge, collect: collect) })
    }

    /// A counter whose samples are read when the registry renders: for counts another component
    /// keeps (a connection pool's waits). `collect` must return values that never decrease while the
    /// process runs, and runs as `gaugeCallback`'s does.
    /// - Precondition: `name` ends in `_total`.
    @discardableResult
    public func counterCallback(_ name: String, help: String, labelNames: [String] = [],
                                collect: @escaping @Sendable () -> [MetricSample]) -> CallbackFamily {
        register(name, make: { CallbackFamily(name: name, help: help, labelNames: labelNames, kind: .counter, collect: collect) })
    }

    /// Every family in the Prometheus text format 0.0.4, families sorted by name.
    public func render() -> String {
        let all = families.withLock { $0.values.sorted { $0.name < $1.name } }
        var text = ""
        // The overflow family appears with its first overflow (most processes never have one).
        for family in all where family.name != Self.labelOverflowMetric || family.seriesCount > 0 { family.render(into: &text) }
        return text
    }

    /// How many series one family has (its callback's samples for a callback gauge); nil when the
    /// family does not exist.
    public func seriesCount(_ name: String) -> Int? {
        families.withLock { $0[name] }?.seriesCount
    }

    /// The current value of one series, for tests and status pages: a counter's or gauge's value, a
    /// histogram's observation count; nil when the family or the series does not exist.
    public func value(_ name: String, labels: [String] = []) -> Double? {
        guard let family = families.withLock({ $0[name] }) else { return nil }
        return family.value(labels: labels)
    }

    private func register<F: MetricFamily>(_ name: String, make: () -> F) -> F {
        families.withLock { families in
            if let existing = families[name] {
                let candidate = make()
                guard let same = existing as? F, same.labelNames == candidate.labelNames else {
                    preconditionFailure("metric \(name) registered again with another type or other label names")
                }
                return same
            }
            let family = make()
            families[name] = family
            return family
        }
    }
}

/// What every family type offers the registry.
protocol MetricFamily: AnyObject, Sendable {
    var name: String { get }
    var labelNames: [String] { get }
    var seriesCount: Int { get }
    func render(into text: inout String)
    func value(labels: [String]) -> Double?
}

/// The registry's label-value bound, shared by its families: the maximum (changeable at run time)
/// and where overflows are counted.
final class LabelLimits: Sendable {
    let maximum: Atomic<Int>
    let overflow: Counter?

    init(maximum: Int, overflow: Counter?) {
        self.maximum = Atomic(max(1, maximum))
        self.overflow = overflow
    }

    /// Counts the labels `limit` replaced, after the family's lock is released.
    func record(_ overflowed: [Int], family: String, labelNames: [String]) {
        guard let overflow else { return }
        for index in overflowed { overflow.increment(labels: [family, labelNames[index]]) }
    }
}

/// A family's series and the label values it has admitted, under one lock.
struct SeriesTable<Value: Sendable>: Sendable {
    var series: [[String]: Value] = [:]
    var limiter: LabelValueLimiter

    init(labelCount: Int) {
        limiter = LabelValueLimiter(labelCount: labelCount)
    }

    /// Applies `change` to the series of `labels`, made with `make()` when new: the series of the
    /// labels themselves when it exists (one lookup, the common case) or every value is admitted,
    /// else the one with each value beyond the bound replaced by `other`.
    /// - Returns: the indices of the labels replaced.
    mutating func update(_ labels: [String], maximum: Int, make: () -> Value, _ change: (inout Value) -> Void) -> [Int] {
        if let index = series.index(forKey: labels) {
            change(&series.values[index])
            return []
        }
        let limited = labels.isEmpty ? (labels: labels, overflowed: []) : limiter.limit(labels, maximum: maximum)
        change(&series[limited.labels, default: make()])
        return limited.overflowed
    }
}
