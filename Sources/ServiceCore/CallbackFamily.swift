/// A gauge or counter family whose samples come from a closure at render time: for values another
/// component keeps (process memory, queue depths, a pool's own counts).
public final class CallbackFamily: MetricFamily {
    /// The Prometheus metric type a callback family declares.
    public enum Kind: String, Sendable {
        /// May go up and down.
        case gauge
        /// Only goes up (until the process restarts); its name ends in `_total`.
        case counter
    }

    let name: String
    let help: String
    let labelNames: [String]
    let kind: Kind
    private let collect: @Sendable () -> [MetricSample]

    init(name: String, help: String, labelNames: [String], kind: Kind, collect: @escaping @Sendable () -> [MetricSample]) {
        MetricName.check(name, labelNames)
        precondition(kind != .counter || name.hasSuffix("_total"), "a counter's name ends in _total: \(name)")
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.kind = kind
        self.collect = collect
    }

    func value(labels: [String]) -> Double? { collect().first { $0.labels == labels }?.value }

    var seriesCount: Int { collect().count }

    func render(into text: inout String) {
        let samples = collect().filter { $0.labels.count == labelNames.count }
        MetricText.family(name: name, help: help, type: kind.rawValue, labelNames: labelNames,
                          samples: samples, into: &text)
    }
}
