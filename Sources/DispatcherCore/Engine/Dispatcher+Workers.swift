import Kafka

// MARK: - Workers (docs/dispatcher-engine.md "Data flow")

extension Dispatcher {
    /// One worker, a child task of the engine's task group: its records run in a child task of its
    /// own, which its cancel hook cancels (a revocation past its drain, a stop that abandons records
    /// waiting out a retry, an escalated stop) without touching the other workers.
    func runWorker(_ worker: EngineStateMachine.WorkerSpawn, _ consumer: KafkaConsumer) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.work(worker, consumer) }
            await waitForEndOrCancel(worker.id)
            group.cancelAll()
        }
    }

    /// Returns when worker `id` ended or is to be cancelled, or the calling task is cancelled.
    private func waitForEndOrCancel(_ id: Int) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = engine.withLock { state -> Bool in
                    if Task.isCancelled || state.machine.workerGone(id) { return true }
                    state.workerHooks[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            engine.withLock { $0.workerHooks.removeValue(forKey: id) }?.resume()
        }
    }

    /// Handles records of one partition until the engine's state has nothing more for this worker.
    private func work(_ worker: EngineStateMachine.WorkerSpawn, _ consumer: KafkaConsumer) async {
        var records = worker.records
        while !records.isEmpty {
            let finished = await handleWithRetries(records, worker: worker, consumer: consumer)
            let cancelled = Task.isCancelled
            let (step, woken) = engine.withLock { state in
                let step = state.machine.workerFinished(worker, records: records, finished: finished, cancelled: cancelled) { offset in
                    // Stored during the event, so that stores of one partition never go backwards.
                    guard case .notAssigned? = consumer.storeOffsets([worker.partition: offset])[worker.partition] else { return true }
                    logger.info("partition no longer assigned: dropping its state", ["partition": "\(worker.partition)"])
                    return false
                }
                state.start(step.spawns)
                let woken = state.take(idle: step.idleWaitersWoken, intake: step.resumeIntake, hooks: step.next.isEmpty ? [worker.id] : [])
                return (step, woken)
            }
            apply(step.flow, to: worker.partition, consumer)
            woken.forEach { $0.resume() }
            records = step.next
        }
    }

    /// Runs `handle` until it succeeds. Transient failures retry with backoff (`InfrastructureRetry`);
    /// a record retried past `stuckRecordThreshold` is logged once a minute.
    /// - Returns: whether the records finished; false when cancelled or abandoned because the process
    ///   is stopping (the records then stay unfinished and are never stored).
    private func handleWithRetries(_ records: [KafkaMessage], worker: EngineStateMachine.WorkerSpawn, consumer: KafkaConsumer) async -> Bool {
        let shouldStop: @Sendable () -> Bool = { [self] in engine.withLock { $0.machine.isAbandoned(worker) } }
        let record = records[0]
        let retryContext = RetryContext(
            partition: worker.partition, recordStartedAt: .now,
            uncommittedRecords: { [self] in engine.withLock { $0.machine.uncommittedRecords(of: worker) } },
            policy: configuration.retryParking, timers: retryTimers,
            recordWaits: { [self] in
                engine.withLock { state in
                    let spawns = state.machine.recordWaits(record, of: worker)
                    state.start(spawns)
                }
            },
            recordResumes: { [self] in engine.withLock { $0.machine.recordResumes(record, of: worker) } })
        var retry = InfrastructureRetry(.init(
            initialDelay: configuration.initialRetryDelay, maximumDelay: configuration.maximumRetryDelay,
            stuckThreshold: configuration.stuckRecordThreshold, stuckLogInterval: configuration.stuckRecordLogInterval))
        while true {
            if Task.isCancelled { return false }
            do {
                return try await handle(records, retryContext: retryContext, shouldStop: shouldStop) != .abandoned
            } catch {
                if Task.isCancelled || error is CancellationError { return false }
                if engine.withLock({ $0.machine.stopping }) { return false }
                let decision = retry.failed(at: .now)
                logRetry(decision, records[0], error)
                engine.withLock { $0.machine.workerRetrying(worker.id, true) }
                let slept: Void? = try? await Task.sleep(for: decision.delay)
                engine.withLock { $0.machine.workerRetrying(worker.id, false) }
                if slept == nil { return false }
            }
        }
    }

    /// The log of one failed attempt: a retry, the record stuck (once a minute), or nothing.
    private func logRetry(_ decision: InfrastructureRetry.Decision, _ first: KafkaMessage, _ error: any Error) {
        var fields = [
            "partition": "\(first.topicPartition)", "offset": "\(first.offset)",
            "key": first.key.map { String(decoding: $0, as: UTF8.self) } ?? "", "error": "\(error)",
        ]
        switch decision.log {
        case .retrying:
            fields["delay_ms"] = "\(decision.delay.wholeMilliseconds)"
            logger.warning("retrying a record after a failure", fields)
        case .stuck(let retryingFor):
            fields["retrying_for_s"] = "\(retryingFor.components.seconds)"
            logger.error("record stuck: still retrying", fields)
        case .quiet:
            break
        }
    }
}
