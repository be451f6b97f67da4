import Foundation
import ServiceCore
import Synchronization

/// The timer that re-drives parked notifications (docs/dispatcher-engine.md "Retries off the hot
/// path, and parking"): every `interval` it claims the due rows of `pending_retries` not claimed by
/// a live lease (`FOR UPDATE SKIP LOCKED`, so replicas never claim the same row) and sends each
/// again through `SendRequestProcessor.redrive`, at most `maxInFlight` at once. A `Service` of the
/// dispatcher's sources: graceful shutdown stops claiming and lets the re-drives in flight finish;
/// cancellation cuts them short (they give their claims back).
final class ParkedRetryDriver: Service {
    private let processor: SendRequestProcessor
    private let store: PendingRetryStore
    private let owner: String
    private let interval: Duration
    private let lease: Duration
    private let maxInFlight: Int
    private let logger: Logger
    private let inFlight = Atomic<Int>(0)
    /// Called after each scan with the number of parked rows (for the `push_pending_retries` gauge).
    private let observe: @Sendable (Int) -> Void

    /// - Parameters:
    ///   - owner: this replica's claim name (unique per process).
    ///   - interval: time between scans when nothing was due.
    ///   - lease: how long a claim lasts.
    ///   - maxInFlight: re-drives running at once.
    init(processor: SendRequestProcessor, store: PendingRetryStore, owner: String, interval: Duration, lease: Duration,
         maxInFlight: Int = 200, logger: Logger, observe: @escaping @Sendable (Int) -> Void = { _ in }) {
        self.processor = processor
        self.store = store
        self.owner = owner
        self.interval = interval
        self.lease = lease
        self.maxInFlight = max(1, maxInFlight)
        self.logger = logger
        self.observe = observe
    }

    /// Scans and re-drives until `shutdown` triggers (no row is claimed any more; re-drives in flight
    /// finish) or the task is cancelled (they are cut short and give their claims back).
    func run(shutdown: GracefulShutdown) async {
        await withDiscardingTaskGroup { group in
            // The gauge's count scans the table: once per interval at most, also while a backlog drains.
            var lastObserved: ContinuousClock.Instant?
            while !Task.isCancelled, !shutdown.isTriggered {
                var claimed = 0
                do {
                    let room = maxInFlight - inFlight.load(ordering: .relaxed)
                    if room > 0 {
                        let due = try await store.claimDue(owner: owner, lease: lease, limit: room)
                        claimed = due.count
                        for retry in due {
                            inFlight.add(1, ordering: .relaxed)
                            group.addTask { [self] in
                                defer { inFlight.subtract(1, ordering: .relaxed) }
                                do {
                                    try await processor.redrive(retry, owner: owner)
                                } catch is CancellationError {
                                } catch {
                                    logger.warning("re-driving a parked notification failed; retried after its lease", [
                                        "request_id": retry.requestID, "error": "\(error)",
                                    ])
                                }
                            }
                        }
                    }
                    if lastObserved.map({ $0.duration(to: .now) >= interval }) ?? true {
                        observe(try await store.count())
                        lastObserved = .now
                    }
                } catch {
                    logger.warning("scanning parked notifications failed", ["error": "\(error)"])
                }
                if claimed == 0 || inFlight.load(ordering: .relaxed) >= maxInFlight {
                    do { try await shutdown.sleep(for: interval) } catch { break }
                }
            }
            if Task.isCancelled { group.cancelAll() }
        }
    }
}
