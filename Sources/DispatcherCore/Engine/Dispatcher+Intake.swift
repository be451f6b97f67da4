import Kafka

// MARK: - Intake (docs/dispatcher-engine.md "Data flow", "Back-pressure")

extension Dispatcher {
    /// Hands each record to the engine's state, which starts the workers it asks for. Waits while the
    /// process's in-flight budget (`maxInFlightRecords` records, `maxInFlightRecordBytes` bytes) has
    /// no room for the next record (the consumer then pauses fetching).
    func intake(_ consumer: KafkaConsumer) async {
        while !Task.isCancelled {
            // Records come in bursts: one suspension per burst, not per record (the cooperative pool
            // is shared with every running request, so each suspension waits its turn).
            let batch = await consumer.nextMessages(maxCount: 512)
            if batch.isEmpty { return }
            for message in batch {
                await waitForRoom(PartitionScheduler.bytes(of: message))
                if Task.isCancelled { return }
                accept(message, consumer)
            }
        }
    }

    /// Hands one record to the engine's state and starts the worker it asks for.
    private func accept(_ message: KafkaMessage, _ consumer: KafkaConsumer) {
        let partition = message.topicPartition
        let received = engine.withLock { state in
            let received = state.machine.recordReceived(message)
            state.start(received.spawns)
            return received
        }
        if received.repeated {
            metrics.recordsRedelivered.increment(labels: [message.topic])
            logger.debug("record handed out again by the consumer: ignored", ["partition": "\(partition)", "offset": "\(message.offset)"])
            return
        }
        apply(received.flow, to: partition, consumer)
        // The span is full: notifications of the partition waiting on a timer are parked, so that
        // their records can finish and the prefix move.
        if received.atCap { retryTimers.parkAll(of: partition) }
    }

    func apply(_ flow: PartitionScheduler.FlowChange?, to partition: KafkaTopicPartition, _ consumer: KafkaConsumer) {
        switch flow {
        case .pause?: consumer.pause([partition])
        case .resume?: consumer.resume([partition])
        case nil: break
        }
    }

    /// Returns when the budget has room for a record of `bytes` (at once in the common case), or
    /// when the calling task is cancelled.
    private func waitForRoom(_ bytes: Int) async {
        if engine.withLock({ $0.machine.hasRoom(forBytes: bytes) }) { return }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = engine.withLock { state -> Bool in
                    if Task.isCancelled || !state.machine.intakeNeedsRoom(forBytes: bytes) { return true }
                    state.intake = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            engine.withLock { state in
                _ = state.machine.intakeStoppedWaiting()
                defer { state.intake = nil }
                return state.intake
            }?.resume()
        }
    }

    /// The engine's queues, for the scrape-time gauges.
    func engineSnapshot() -> DispatcherMonitor.EngineSnapshot {
        engine.withLock { state in
            var snapshot = DispatcherMonitor.EngineSnapshot()
            snapshot.recordsInFlight = state.machine.pendingRecords
            snapshot.uncommitted = state.machine.uncommitted
            return snapshot
        }
    }
}

extension Dispatcher.EngineState {
    /// Hands spawned workers to the engine's task group; a spawn after the group stopped taking any
    /// ends its worker at once.
    mutating func start(_ spawns: [EngineStateMachine.WorkerSpawn]) {
        for spawn in spawns {
            if case .enqueued = spawner?.yield(spawn) { continue }
            for id in machine.workerEnded(spawn.id) { idle.removeValue(forKey: id)?.resume() }
        }
    }

    /// The continuations to resume for `ids` of idle waiters, the intake when `resumeIntake`, and
    /// the cancel hooks of `workers`.
    mutating func take(idle ids: [Int], intake resumeIntake: Bool = false, hooks workers: [Int] = []) -> [CheckedContinuation<Void, Never>] {
        var woken = ids.compactMap { idle.removeValue(forKey: $0) }
        if resumeIntake, let intake {
            woken.append(intake)
            self.intake = nil
        }
        woken += workers.compactMap { workerHooks.removeValue(forKey: $0) }
        return woken
    }
}
