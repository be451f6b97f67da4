/// The project's Kafka topics (docs/semantics.md, README "Settings"): their default names, which the `PUSH_TOPIC_*`
/// settings override, and the partition counts the development broker creates them with. The one
/// place these names are written; the Kafka module knows no project topic.
public enum PushTopic: String, Sendable, CaseIterable {
    /// `push.v1.TokenEvent` records, keyed by device token: registration service → dispatcher.
    case tokenEvents = "push.token-events.v1"
    /// `push.v1.SendRequest` and `push.v1.CancelRequest` records: producers → dispatcher.
    case sendRequests = "push.send-requests.v1"
    /// `push.v1.FeedbackEvent` records: dispatcher → producers.
    case feedback = "push.feedback.v1"
    /// `push.v1.DeadLetter` records: records no consumer could use.
    case deadLetter = "push.dead-letter.v1"

    /// The default topic name.
    public var name: String { rawValue }

    /// The partitions the development broker gives the topic.
    public var developmentPartitions: Int { self == .deadLetter ? 1 : 6 }
}
