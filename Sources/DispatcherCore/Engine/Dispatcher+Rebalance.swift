import Foundation
import Kafka

// MARK: - Stopping and rebalances (docs/dispatcher-engine.md "Stopping", "Rebalances")

extension Dispatcher {
    /// The engine's graceful stop, after intake stopped: queued records are dropped, records waiting
    /// out an infrastructure retry are abandoned, notifications waiting for an APNs retry are parked,
    /// running records finish; then the producer is flushed. Cancelled meanwhile (escalated), every
    /// worker is cancelled and given a moment to end; nothing more is stored.
    func stopEngine() async {
        monitor.readiness.setPhase(.stopping)
        logger.info("dispatcher stopping: intake stopped, waiting for running records")
        let (stop, hooks) = engine.withLock { state in
            let stop = state.machine.stopRequested()
            return (stop, state.take(idle: [], intake: stop.resumeIntake, hooks: stop.cancel))
        }
        hooks.forEach { $0.resume() }
        // Notifications waiting for an APNs retry are parked: durable, their records may finish.
        retryTimers.parkAll()
        if stop.dropped > 0 { logger.info("records not started are left for the next owner", ["records": "\(stop.dropped)"]) }
        _ = await withTaskCancellationHandler {
            await waitUntilIdle(nil)
        } onCancel: {
            self.cancelWorkers(of: nil)
        }
        if Task.isCancelled {
            // Escalated: every worker was cancelled; give them a moment to end, store nothing more.
            logger.warning("shutdown escalated: unfinished records are abandoned, not stored")
            cancelWorkers(of: nil)
            await waitForCancelledWorkers(timeout: .seconds(2))
        } else {
            do {
                try await producer.flush(timeout: .seconds(10))
            } catch {
                logger.warning("producer flush on shutdown", ["error": "\(error)"])
            }
        }
    }

    /// Cancels the workers of `partitions` (all workers when nil) through their cancel hooks.
    func cancelWorkers(of partitions: Set<KafkaTopicPartition>?) {
        let hooks = engine.withLock { state in
            let cancelled = state.machine.cancelWorkers(of: partitions)
            return state.take(idle: [], hooks: cancelled)
        }
        hooks.forEach { $0.resume() }
    }

    /// Waits up to `timeout` for every worker to end, also when the calling task is cancelled (the
    /// escalated stop gives cancelled workers a moment before the consumer closes): the timer is a
    /// dispatch timer, since a child task of a cancelled task could not sleep.
    private func waitForCancelledWorkers(timeout: Duration) async {
        let id = engine.withLock { $0.machine.makeID() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let waits = engine.withLock { state -> Bool in
                guard state.machine.waitForIdle(id, partitions: nil) else { return false }
                state.idle[id] = continuation
                return true
            }
            guard waits else { return continuation.resume() }
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(timeout.wholeMilliseconds))) { [self] in
                stopWaitingForIdle(id)
            }
        }
    }

    /// Returns once no worker serves `partitions` (any partition when nil), after `timeout`, or when
    /// the calling task is cancelled. The timeout is a child task of this call.
    /// - Returns: whether they became idle.
    @discardableResult
    func waitUntilIdle(_ partitions: Set<KafkaTopicPartition>?, timeout: Duration? = nil) async -> Bool {
        let id = engine.withLock { $0.machine.makeID() }
        await withTaskGroup(of: Void.self) { group in
            if let timeout {
                group.addTask {
                    try? await Task.sleep(for: timeout)
                    self.stopWaitingForIdle(id)
                }
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let waits = engine.withLock { state -> Bool in
                        guard !Task.isCancelled, state.machine.waitForIdle(id, partitions: partitions) else { return false }
                        state.idle[id] = continuation
                        return true
                    }
                    if !waits { continuation.resume() }
                }
            } onCancel: {
                stopWaitingForIdle(id)
            }
            group.cancelAll()
        }
        return engine.withLock { $0.machine.isIdle(partitions) }
    }

    /// Idle waiter `id` stops waiting (resumed when it still waited).
    private func stopWaitingForIdle(_ id: Int) {
        engine.withLock { state in
            state.machine.stopWaitingForIdle(id) ? state.idle.removeValue(forKey: id) : nil
        }?.resume()
    }

    /// Lets a revocation proceed once the revoked partitions' running records finished, at most
    /// `revokeDrain` later; queued records are dropped, records on a retry timer are abandoned at once,
    /// and records still running after the drain are cancelled (all of them stay unfinished). A lost
    /// assignment is not waited for and cancels no running record: those start no new notification,
    /// finish what is in flight and are never stored; a re-read record of the same request joins them.
    func watchRebalances(_ consumer: KafkaConsumer) async {
        for await event in consumer.events {
            switch event {
            case .partitionsAssigned:
                break  // the consumer logs assignments
            case .partitionsRevoked(let revocation):
                await revoke(revocation)
            case .error(let error):
                logger.warning("consumer error", ["error": "\(error)"])
            }
        }
    }

    private func revoke(_ revocation: KafkaRevocation) async {
        let revoked = Set(revocation.partitions)
        let (drain, hooks) = engine.withLock { state in
            // A lost assignment is handled like a revocation, without the wait: running records
            // start no new notification, those in flight finish, nothing is stored.
            let revoking = revocation.isLost
                ? (cancel: state.machine.assignmentLost(revoked), drain: false)
                : state.machine.partitionsRevoked(revoked, lost: false)
            return (revoking.drain, state.take(idle: [], hooks: revoking.cancel))
        }
        hooks.forEach { $0.resume() }
        retryTimers.parkAll { revoked.contains($0) }
        let drained = drain ? await waitUntilIdle(revoked, timeout: configuration.revokeDrain) : true
        if !drained {
            logger.warning("revocation drain time over: cancelling records still running", ["partitions": revoked.map { "\($0)" }.joined(separator: ",")])
        }
        engine.withLock { state in
            let ended = state.machine.revocationEnded(revoked, drained: drained)
            return state.take(idle: [], intake: ended.resumeIntake, hooks: ended.cancel)
        }.forEach { $0.resume() }
        logger.info("revoked partitions drained", [
            "partitions": revocation.partitions.map { "\($0)" }.joined(separator: ","), "lost": "\(revocation.isLost)",
            "finished_in_time": "\(drained)",
        ])
        revocation.finish()
    }
}
