/// Bounds the distinct values of each label of one metric family: the first `maximum` values of a
/// label are kept, every later one is replaced by `other`, so a caller that chooses label values
/// (a bundle id in a request, a reason from a peer) cannot grow the series without bound. The value
/// `other` itself is always allowed. Pure bookkeeping; `MetricsRegistry`'s families keep one under
/// their lock and count each replacement in `push_metrics_label_overflow_total{metric,label}`.
public struct LabelValueLimiter: Sendable {
    /// The value a label takes once its bound is reached.
    public static let overflowValue = "other"

    private var admitted: [Set<String>]

    /// A limiter for a family with `labelCount` labels.
    public init(labelCount: Int) {
        admitted = Array(repeating: [], count: labelCount)
    }

    /// Distinct values admitted so far for the label at `index`.
    public func admittedCount(label index: Int) -> Int { admitted[index].count }

    /// The labels to count under, admitting values not seen before while their label has fewer than
    /// `maximum` distinct values.
    /// - Parameters:
    ///   - labels: positional label values, one per label of the family.
    ///   - maximum: distinct values per label, ≥ 1.
    /// - Returns: the labels with each value beyond the bound replaced by `other`, and the indices of
    ///   the labels replaced.
    public mutating func limit(_ labels: [String], maximum: Int) -> (labels: [String], overflowed: [Int]) {
        precondition(labels.count == admitted.count, "a limiter for \(admitted.count) labels got \(labels.count)")
        var result = labels
        var overflowed: [Int] = []
        for (index, value) in labels.enumerated() where value != Self.overflowValue && !admitted[index].contains(value) {
            if admitted[index].count < maximum {
                admitted[index].insert(value)
            } else {
                result[index] = Self.overflowValue
                overflowed.append(index)
            }
        }
        return (result, overflowed)
    }
}
