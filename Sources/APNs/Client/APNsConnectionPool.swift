import Foundation
import HTTP2
import PushDomain
import ServiceCore
import Synchronization

/// One HTTP/2 connection of a pool.
///
/// `@unchecked Sendable`: the `var` fields are read and written only while the owning pool's
/// `Mutex` is held (`APNsConnectionPool.state`); the `let` fields are immutable.
final class PooledConnection: @unchecked Sendable {
    let id: Int
    let slot: Int
    let connection: HTTP2Connection
    let address: String
    /// When it was opened (monotonic ms, `APNsConnectionPool.monotonicMilliseconds()`).
    let openedAt = APNsConnectionPool.monotonicMilliseconds()
    /// Fired when the connection must be replaced (GOAWAY, closed, retired).
    let ended = OneShot()
    /// Streams we opened and that have not finished yet.
    var inFlight = 0
    /// Token auth: false until a request succeeded; until then one stream only (docs/apns-protocol.md §6).
    var trusted: Bool
    /// No new streams: GOAWAY received, closed or retired.
    var retired = false
    /// The JWT this connection sends and the rules for changing it (times on the token cache's clock).
    var providerToken = APNsConnectionProviderToken()
    /// `bearer <jwt>`, built once per JWT.
    var authorization: String = ""
    var lastActivity: ContinuousClock.Instant
    /// When a stream of this connection was last answered (any status): proof that it works.
    var lastAnswer: ContinuousClock.Instant?
    var pinging = false
    /// A stream timed out here: no new streams until a PING proves the connection alive.
    var suspect = false
    /// Per-connection rate cap (token bucket): requests that may start now, and when it was filled.
    var rateTokens: Double = 1
    var rateFilledAt: ContinuousClock.Instant = .now

    init(id: Int, slot: Int, connection: HTTP2Connection, address: String, trusted: Bool) {
        self.id = id
        self.slot = slot
        self.connection = connection
        self.address = address
        self.trusted = trusted
        self.lastActivity = .now
    }

    /// Streams the pool may have open on this connection now: the server's current
    /// SETTINGS_MAX_CONCURRENT_STREAMS (1 before the first success with token auth), capped.
    func capacity(cap: Int?) -> Int {
        guard !retired, !suspect, connection.isUsable else { return 0 }
        var limit = connection.maxConcurrentStreams
        if !trusted { limit = min(limit, 1) }
        if let cap { limit = min(limit, cap) }
        return limit
    }
}

/// The connections of one (credentials, environment) pair (docs/apns-protocol.md §6 "Connection
/// management"): `connectionsPerPool` slots, each opened after its own DNS look-up, staggered, and
/// replaced after GOAWAY, a drop, a failed PING or a retirement, with exponential backoff and jitter
/// between failed attempts. Requests lease one stream at a time; when no connection has a free
/// stream they wait in a bounded FIFO.
final class APNsConnectionPool: Sendable {
    typealias Configuration = APNsClient.Configuration

    private struct Waiter {
        let continuation: CheckedContinuation<PooledConnection, any Error>
    }

    private struct State {
        var slots: [PooledConnection?]
        var waiters: [UInt64: Waiter] = [:]
        var order: [UInt64] = []
        var orderHead = 0
        var nextWaiterID: UInt64 = 0
        var nextConnectionID = 0
        var started = false
        var shutDown = false
        /// Counts starts: a slot task of an earlier start (closed while idle) installs nothing.
        var generation = 0
        /// The last time a caller asked for a stream (the idle close's clock).
        var lastUse: ContinuousClock.Instant = .now
        /// When `TopicDisallowed` replaces the connections.
        var topicScope = APNsTopicScopeRefresh()

        var waiting: Int { waiters.count }

        /// The connection with a free stream and the fewest streams in flight (spreading traffic
        /// over the connections, reference §6), or nil.
        func pick(cap: Int?, rate: Double?) -> PooledConnection? {
            var best: PooledConnection?
            let now: ContinuousClock.Instant? = rate == nil ? nil : .now
            for case let candidate? in slots where candidate.inFlight < candidate.capacity(cap: cap) {
                if let rate, let now {
                    // Refill the bucket (at most one second's worth) and skip an empty one.
                    let elapsed = candidate.rateFilledAt.duration(to: now)
                    let seconds = elapsed.inSeconds
                    candidate.rateTokens = min(max(1, rate), candidate.rateTokens + seconds * rate)
                    candidate.rateFilledAt = now
                    if candidate.rateTokens < 1 { continue }
                }
                if best == nil || candidate.inFlight < best!.inFlight { best = candidate }
            }
            if rate != nil { best?.rateTokens -= 1 }
            return best
        }

        /// Hands free streams to waiters in FIFO order; returns whom to resume.
        mutating func dispatch(cap: Int?, rate: Double?) -> [(Waiter, PooledConnection)] {
            var ready: [(Waiter, PooledConnection)] = []
            while orderHead < order.count {
                let id = order[orderHead]
                guard let waiter = waiters[id] else {
                    orderHead += 1
                    continue
                }
                guard let connection = pick(cap: cap, rate: rate) else { break }
                connection.inFlight += 1
                waiters[id] = nil
                orderHead += 1
                ready.append((waiter, connection))
            }
            if orderHead == order.count {
                order.removeAll(keepingCapacity: true)
                orderHead = 0
            } else if orderHead > 4096 && orderHead * 2 > order.count {
                order.removeFirst(orderHead)
                orderHead = 0
            }
            return ready
        }

        mutating func removeAllWaiters() -> [Waiter] {
            let all = order[orderHead...].compactMap { waiters[$0] }
            waiters.removeAll()
            order.removeAll()
            orderHead = 0
            return all
        }
    }

    let environment: APNsEnvironment
    /// The `environment` label of this pool's metrics, made once (they are updated on every send).
    private let environmentLabels: [String]
    let endpoint: Configuration.Endpoint
    /// `:authority` of every request.
    let authority: String
    let credentials: APNsCredentials
    private let configuration: Configuration
    private let metrics: APNsClientMetrics
    private let logger: Logger
    private let state: Mutex<State>
    private let tasks = Mutex<[Task<Void, Never>]>([])
    /// Sends that hold this pool (``enter()``…``leave()``), retries and backoff waits included: a
    /// drained pool closes once none does. An atomic, not the state's lock: it moves twice per send.
    private let users = Atomic<Int>(0)
    /// Set by ``drain()``: the last ``leave()`` wakes `drained`.
    private let draining = Atomic<Bool>(false)
    private let drained = Mutex<CheckedContinuation<Void, Never>?>(nil)

    init(
        environment: APNsEnvironment, endpoint: Configuration.Endpoint? = nil, service: APNsService = .push, credentials: APNsCredentials,
        configuration: Configuration, metrics: APNsClientMetrics, logger: Logger
    ) {
        self.environment = environment
        self.environmentLabels = [environment.rawValue]
        self.endpoint = endpoint ?? configuration.endpoint(for: environment)
        self.authority = self.endpoint.authority
        self.credentials = credentials
        self.configuration = configuration
        self.metrics = metrics
        let pool = service == .push ? "\(credentials.label)/\(environment)" : "\(credentials.label)/\(environment)/\(service)"
        self.logger = logger.with(["pool": pool])
        self.state = Mutex(State(slots: Array(repeating: nil, count: max(1, configuration.connectionsPerPool))))
        var policy = configuration.circuitBreaker
        policy.minimumConnections = min(policy.minimumConnections, max(1, configuration.connectionsPerPool))
        self.breaker = Mutex(APNsCircuitBreaker(policy: policy))
    }

    private var streamCap: Int? { configuration.maxStreamsPerConnection }
    private var rateCap: Double? { configuration.maxRequestsPerSecondPerConnection.map { Double(max(1, $0)) } }

    // MARK: Leases

    /// A connection with a free stream, counted as in flight until ``release(_:status:)``. Waits
    /// (FIFO) while every stream is busy.
    /// - Throws: `APNsError` `.tooManyQueuedRequests` when `maxQueuedRequests` callers already wait,
    ///   `.shutDown` after ``shutdown()``; `HTTP2Error` `.connectFailed` when no connection could be
    ///   opened; `CancellationError`.
    func acquire(waitingAtMost limit: Duration) async throws -> PooledConnection {
        startIfNeeded()
        let cap = streamCap
        let rate = rateCap
        // Fast path: no continuation when a stream is free.
        let immediate: Result<PooledConnection, any Error>? = state.withLock { state in
            if state.shutDown { return .failure(APNsError(code: .shutDown, message: "the APNs client was shut down")) }
            guard state.waiting == 0, let connection = state.pick(cap: cap, rate: rate) else { return nil }
            connection.inFlight += 1
            return .success(connection)
        }
        if let immediate {
            if case .success = immediate { metrics.activeStreams.increment(labels: environmentLabels) }
            return try immediate.get()
        }

        let id = state.withLock { state in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        let queueLimit = configuration.maxQueuedRequests
        // A waiter that no stream reaches in time (every connection dead, opening or suspect) gives
        // up: its attempt must end within the request timeout plus connection set-up.
        let timer = Task { [self] in
            try await Task.sleep(for: limit)
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume(throwing: HTTP2Error(
                .connectFailed, "no stream to \(endpoint.host):\(endpoint.port) came free within \(limit.wholeMilliseconds) ms"))
        }
        defer { timer.cancel() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<PooledConnection, any Error>) in
                let outcome: Result<PooledConnection, any Error>? = state.withLock { state in
                    if state.shutDown { return .failure(APNsError(code: .shutDown, message: "the APNs client was shut down")) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if state.waiting == 0, let connection = state.pick(cap: cap, rate: rate) {
                        connection.inFlight += 1
                        return .success(connection)
                    }
                    if state.waiting >= queueLimit {
                        return .failure(APNsError(code: .tooManyQueuedRequests, message: "\(state.waiting) requests already wait for a stream to \(endpoint.host) (maxQueuedRequests)"))
                    }
                    state.waiters[id] = Waiter(continuation: continuation)
                    state.order.append(id)
                    return nil
                }
                if rate != nil { scheduleRateWakeUp() }
                if let outcome {
                    if case .failure(let error as APNsError) = outcome, error.code == .tooManyQueuedRequests {
                        metrics.increment("queue_full")
                    }
                    if case .success = outcome { metrics.activeStreams.increment(labels: environmentLabels) }
                    continuation.resume(with: outcome)
                }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Ends a lease. A 200 answer trusts a token-auth connection (it may fan out now).
    func release(_ connection: PooledConnection, status: Int?) {
        let cap = streamCap
        let rate = rateCap
        let ready = state.withLock { state in
            connection.inFlight -= 1
            connection.lastActivity = .now
            if status != nil { connection.lastAnswer = connection.lastActivity }
            if status == 200 { connection.trusted = true }
            return state.dispatch(cap: cap, rate: rate)
        }
        // One stream ended, `ready.count` waiters got one: the gauge moves once, outside the pool's lock.
        if ready.count != 1 { metrics.activeStreams.increment(by: Double(ready.count - 1), labels: environmentLabels) }
        for (waiter, leased) in ready { waiter.continuation.resume(returning: leased) }
    }

    private func dispatch() {
        let cap = streamCap
        let rate = rateCap
        let (ready, waiting) = state.withLock { state in (state.dispatch(cap: cap, rate: rate), state.waiting) }
        if !ready.isEmpty { metrics.activeStreams.increment(by: Double(ready.count), labels: environmentLabels) }
        for (waiter, leased) in ready { waiter.continuation.resume(returning: leased) }
        if rate != nil && waiting > 0 { scheduleRateWakeUp() }
    }

    private let rateWakeUpScheduled = Atomic<Bool>(false)

    /// With a rate cap, waiters may wait for a bucket to refill rather than for a stream: wake the
    /// queue again after one token's time.
    private func scheduleRateWakeUp() {
        guard let rate = rateCap, !rateWakeUpScheduled.exchange(true, ordering: .relaxed) else { return }
        Task {
            try? await Task.sleep(for: .seconds(1 / rate))
            rateWakeUpScheduled.store(false, ordering: .relaxed)
            dispatch()
        }
    }

    /// Takes `connection` out of service: no new streams; the streams it has finish; its slot opens
    /// a replacement (after a fresh DNS look-up).
    func retire(_ connection: PooledConnection, cause: String, because why: String) {
        let removed = state.withLock { state -> Bool in
            let wasActive = !connection.retired
            connection.retired = true
            if state.slots[connection.slot] === connection { state.slots[connection.slot] = nil }
            return wasActive
        }
        if removed {
            metrics.increment("connections_retired")
            metrics.connections.decrement(labels: environmentLabels)
            metrics.connectionsRetired.increment(labels: [environment.rawValue, cause])
            logger.info("retiring APNs connection", ["connection": "\(connection.id)", "address": connection.address, "why": why])
        }
        connection.ended.fire()
    }

    /// Retires every connection that sends `jwt` (APNs refused it as expired): the retry goes out on
    /// a new connection with the renewed token.
    func retireConnections(using jwt: APNsJWT) {
        let using = state.withLock { state in state.slots.compactMap { $0 }.filter { $0.providerToken.current == jwt && !$0.retired } }
        for connection in using { retire(connection, cause: "expired_provider_token", because: "APNs refused its JWT as expired (ExpiredProviderToken)") }
    }

    /// After 400 `TopicDisallowed` on `connection`: ``APNsTopicScopeRefresh``'s decision, performed.
    /// True: the answering connection and every one opened before the moment are retired, and the
    /// send retries on a new one. False: the answer is final.
    /// Certificate connections never: a certificate's topics are in the certificate (§5).
    func replaceConnectionsForTopic(answeredOn connection: PooledConnection) -> Bool {
        guard credentials.providerTokens != nil else { return false }
        let now = Self.monotonicMilliseconds()
        let (retry, stale) = state.withLock { state -> (Bool, [PooledConnection]) in
            switch state.topicScope.topicDisallowed(connectionOpenedAt: connection.openedAt, now: now) {
            case .final:
                return (false, [])
            case .retryOnNewConnection(let before):
                guard let before else { return (true, []) }
                return (true, state.slots.compactMap { $0 }.filter { !$0.retired && $0 !== connection && $0.openedAt < before })
            }
        }
        guard retry else { return false }
        let why = "APNs answered TopicDisallowed: connections opened before may predate the key's topics"
        retire(connection, cause: "topic_disallowed", because: why)
        for other in stale { retire(other, cause: "topic_disallowed", because: why) }
        return true
    }

    /// A stream on `connection`, started at `started`, got no answer within the request timeout. When
    /// the connection answered another stream since, it works and the timeout is the device token's
    /// (nothing to do, and nothing for the circuit breaker). Otherwise the connection takes no new
    /// streams until a PING proves it alive, and is closed when the PING is not answered in time (a
    /// stall of the whole connection, which the breaker counts).
    func streamTimedOut(on connection: PooledConnection, started: ContinuousClock.Instant) {
        let ping = state.withLock { _ -> Bool in
            guard !connection.retired else { return false }
            if let answered = connection.lastAnswer, answered > started { return false }
            connection.suspect = true
            guard !connection.pinging else { return false }
            connection.pinging = true
            return true
        }
        if ping { Task { await self.ping(connection) } }
    }

    // MARK: Circuit breaker

    private let breaker: Mutex<APNsCircuitBreaker>

    /// Whether a send may go now (see `APNsCircuitBreaker`); `mayProbe`: the notification may be the
    /// half-open trial (no failure of its own, no failure history of its device token).
    func admit(mayProbe: Bool = true) -> APNsCircuitBreaker.Admission {
        let (admission, transition) = breaker.withLock {
            $0.admit(nowMilliseconds: Self.monotonicMilliseconds(), random: Double.random(in: 0...1), mayProbe: mayProbe)
        }
        if let transition { report(transition) }
        return admission
    }

    /// The half-open trial failed for its device token's reason: another notification may probe.
    func abandonTrial() {
        metrics.increment("circuit_trials_abandoned")
        breaker.withLock { $0.abandonTrial(nowMilliseconds: Self.monotonicMilliseconds()) }
    }

    /// APNs answered below 500.
    func recordAnswer() {
        guard let transition = breaker.withLock({ $0.recordSuccess(nowMilliseconds: Self.monotonicMilliseconds()) }) else { return }
        report(transition)
    }

    private let connectFailureIDs = Atomic<Int>(0)

    /// An Apple-wide failure on `connection` (a 5xx answer, a lost connection, a GOAWAY, an unanswered
    /// PING); nil: no connection could be had.
    func recordFailure(on connection: PooledConnection?) {
        let id = connection?.id ?? -(connectFailureIDs.add(1, ordering: .relaxed).newValue)
        guard let transition = breaker.withLock({ $0.recordFailure(connection: id, nowMilliseconds: Self.monotonicMilliseconds()) }) else { return }
        report(transition)
    }

    /// The breaker's state (metric `push_apns_circuit_state`).
    var circuitState: APNsCircuitBreaker.State { breaker.withLock { $0.state } }

    private func report(_ transition: APNsCircuitBreaker.Transition) {
        metrics.circuitState.set(Double(transition.to.rawValue), labels: environmentLabels)
        metrics.increment("circuit_\(transition.to)")
        switch transition.to {
        case .open:
            logger.warning("APNs circuit breaker open: APNs fails on every connection; nothing is sent until one notification is let through", [
                "from": "\(transition.from)", "open_ms": "\(transition.openFor?.wholeMilliseconds ?? 0)",
            ])
        case .halfOpen:
            logger.info("APNs circuit breaker half-open: letting one queued notification through", [:])
        case .closed:
            logger.info("APNs circuit breaker closed: sending ramps up again", ["from": "\(transition.from)"])
        }
    }

    private static let origin = ContinuousClock.now

    /// Milliseconds on the continuous clock since an arbitrary origin (the breaker's time base).
    static func monotonicMilliseconds() -> Int64 { origin.duration(to: .now).wholeMilliseconds }

    // MARK: Provider tokens per connection

    /// What to send as `authorization` on `connection` now: ``APNsConnectionProviderToken``'s decision,
    /// performed (the shared JWT taken from the credentials' cache when the connection needs one).
    /// Returns `.retireConnection` when no JWT satisfies Apple's rules on this connection (only after
    /// a clock jump).
    /// - Throws: `APNsError` `.signingFailed`.
    func providerToken(for connection: PooledConnection) throws(APNsError) -> ProviderTokenChoice {
        guard let cache = credentials.providerTokens else { return .certificate }
        let now = cache.nowSeconds
        return try state.withLock { _ throws(APNsError) -> ProviderTokenChoice in
            switch connection.providerToken.decide(now: now) {
            case .keep(let jwt):
                return .send(jwt, authorization: connection.authorization)
            case .retireConnection:
                return .retireConnection
            case .takeShared(let maximumAge):
                let fresh = try cache.currentToken(maximumAge: maximumAge)
                if connection.providerToken.current != fresh || connection.authorization.isEmpty {
                    if connection.providerToken.install(fresh, now: now) { metrics.increment("provider_token_changes") }
                    connection.authorization = "bearer " + fresh.token
                }
                return .send(fresh, authorization: connection.authorization)
            }
        }
    }

    /// After 429 `TooManyProviderTokenUpdates` to `rejected` on `connection`: the connection sends its
    /// previous JWT again while it is valid (``APNsConnectionProviderToken/refusedChange(to:now:)``),
    /// or is retired when there is none to go back to.
    func restorePreviousProviderToken(on connection: PooledConnection, rejected: APNsJWT) {
        guard let cache = credentials.providerTokens else { return }
        let now = cache.nowSeconds
        let restored = state.withLock { _ -> APNsJWT?? in
            guard connection.providerToken.current == rejected else { return .some(nil) }  // gone back already
            guard connection.providerToken.refusedChange(to: rejected, now: now), let current = connection.providerToken.current
            else { return .none }
            connection.authorization = "bearer " + current.token
            return .some(current)
        }
        switch restored {
        case .none:
            retire(connection, cause: "provider_token_update_refused",
                   because: "APNs refused its JWT change (TooManyProviderTokenUpdates) and its previous JWT is no longer valid")
        case .some(let previous?):
            metrics.increment("provider_token_restores")
            logger.warning("APNs refused a JWT change on a connection (TooManyProviderTokenUpdates): it sends its previous JWT until that expires", [
                "connection": "\(connection.id)", "restored_iat": "\(previous.issuedAt)", "refused_iat": "\(rejected.issuedAt)",
            ])
        case .some(nil):
            break
        }
    }

    /// What ``providerToken(for:)`` decided.
    enum ProviderTokenChoice {
        /// Certificate authentication: no `authorization` header.
        case certificate
        /// Send this JWT; `authorization` is its `bearer <JWT>` header value.
        case send(APNsJWT, authorization: String)
        /// The connection can neither keep its JWT nor change it yet: replace the connection.
        case retireConnection
    }

    // MARK: Lifecycle

    private func startIfNeeded() {
        let generation = state.withLock { state -> Int? in
            state.lastUse = .now
            guard !state.started, !state.shutDown else { return nil }
            state.started = true
            state.generation += 1
            return state.generation
        }
        guard let generation else { return }
        let count = max(1, configuration.connectionsPerPool)
        var started: [Task<Void, Never>] = []
        for slot in 0..<count {
            started.append(Task { await self.runSlot(slot, generation: generation) })
        }
        started.append(Task { await self.runHealthChecks() })
        tasks.withLock { $0 += started }
        logger.info("APNs pool started", ["host": endpoint.host, "port": "\(endpoint.port)", "connections": "\(count)"])
    }

    /// Stops every slot, fails waiting callers and closes the connections gracefully.
    func shutdown() async {
        let (waiters, connections) = state.withLock { state -> ([Waiter], [PooledConnection]) in
            state.shutDown = true
            let connections = state.slots.compactMap { $0 }
            for index in state.slots.indices { state.slots[index] = nil }
            return (state.removeAllWaiters(), connections)
        }
        for waiter in waiters { waiter.continuation.resume(throwing: APNsError(code: .shutDown, message: "the APNs client was shut down")) }
        let running = tasks.withLock { tasks in
            defer { tasks.removeAll() }
            return tasks
        }
        for task in running { task.cancel() }
        for connection in connections {
            connection.ended.fire()
            await connection.connection.close()
        }
        for task in running { await task.value }
    }

    /// A send starts using this pool (its attempts, retries and the waits between them); paired with
    /// ``leave()``.
    func enter() {
        users.wrappingAdd(1, ordering: .sequentiallyConsistent)
    }

    /// A send stopped using this pool; the last one wakes a ``drain()``.
    func leave() {
        let left = users.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue
        if left == 0, draining.load(ordering: .sequentiallyConsistent) { wakeDrain() }
    }

    private func wakeDrain() {
        drained.withLock { waiter -> CheckedContinuation<Void, Never>? in
            defer { waiter = nil }
            return waiter
        }?.resume()
    }

    /// Closes the pool gracefully once no send uses it (its credentials were removed: no new send
    /// reaches it, docs/apns-client.md "Key rotation"): every send that holds it finishes, retries
    /// included, on its connections; then ``shutdown()`` closes them with GOAWAY. Cancellation stops
    /// the wait and closes at once (open streams still finish).
    func drain() async {
        draining.store(true, ordering: .sequentiallyConsistent)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                drained.withLock { $0 = continuation }
                // The last leave() may have come before the continuation was stored.
                if users.load(ordering: .sequentiallyConsistent) == 0 || Task.isCancelled { wakeDrain() }
            }
        } onCancel: {
            wakeDrain()
        }
        logger.info("APNs pool drained: its credentials were removed; closing its connections", [:])
        metrics.increment("pools_drained")
        await shutdown()
    }

    /// Keeps slot `slot` connected: DNS, connect, serve until it must be replaced, repeat; until the
    /// pool shuts down or closes while idle (a later `generation` starts afresh).
    private func runSlot(_ slot: Int, generation: Int) async {
        if slot > 0 {
            // Stagger the opens (forum 778909: "stagger connection opens by a few seconds").
            try? await Task.sleep(for: configuration.connectStagger * slot)
        }
        var failures = 0
        while !Task.isCancelled {
            let connection: PooledConnection
            do {
                connection = try await open(slot: slot)
                failures = 0
            } catch {
                if Task.isCancelled { return }
                failures += 1
                metrics.increment("connect_failures")
                let delay = configuration.reconnectBackoff.delay(afterFailures: failures)
                logger.warning("APNs connect failed", ["slot": "\(slot)", "error": "\(error)", "retry_in_ms": "\(delay.wholeMilliseconds)"])
                failWaitersIfNoConnection(error)
                try? await Task.sleep(for: delay)
                continue
            }
            let installed = state.withLock { state -> Bool in
                guard !state.shutDown, state.started, state.generation == generation else { return false }
                state.slots[slot] = connection
                return true
            }
            guard installed else {
                await connection.connection.close()
                return
            }
            dispatch()
            await watch(connection)
            retire(connection, cause: "replaced", because: "replaced")
            let old = connection.connection
            Task { await old.close() }  // graceful: its open streams finish first
            if Task.isCancelled { return }
            // Do not hammer APNs with opens (reference §6): a short pause before the replacement.
            try? await Task.sleep(for: configuration.reconnectBackoff.initial)
        }
    }

    private func open(slot: Int) async throws -> PooledConnection {
        metrics.increment("dns_lookups")
        let addresses = try await HostResolver.numericAddresses(host: endpoint.host, port: endpoint.port)
        // Avoid reusing an address another connection of this pool is on, where possible.
        let used = state.withLock { Set($0.slots.compactMap { $0?.address }) }
        let address = addresses.first { !used.contains($0) } ?? addresses[slot % addresses.count]
        var tls = HTTP2ClientTLS(caFile: configuration.caFile, serverName: endpoint.host)
        if case .certificate(let certificate) = credentials {
            tls.clientCertificate = .pem(certificateChain: certificate.certificateChainPEM, privateKey: certificate.privateKeyPEM)
        }
        var http2 = HTTP2Connection.Configuration(tls: tls)
        http2.connectTimeout = configuration.connectTimeout
        let connection = try await HTTP2Connection.connect(host: address, port: endpoint.port, configuration: http2)
        let id = state.withLock { state in
            state.nextConnectionID += 1
            return state.nextConnectionID
        }
        metrics.increment("connections_opened")
        metrics.connections.increment(labels: environmentLabels)
        logger.info("APNs connection open", [
            "connection": "\(id)", "slot": "\(slot)", "address": address, "max_concurrent_streams": "\(connection.maxConcurrentStreams)",
        ])
        return PooledConnection(id: id, slot: slot, connection: connection, address: address, trusted: credentials.providerTokens == nil)
    }

    /// Follows the connection's events until it must be replaced.
    private func watch(_ connection: PooledConnection) async {
        let events = Task {
            for await event in connection.connection.events {
                switch event {
                case .settingsChanged(let maxConcurrentStreams, _):
                    logger.debug("SETTINGS", ["connection": "\(connection.id)", "max_concurrent_streams": "\(maxConcurrentStreams)"])
                    dispatch()
                case .goAwayReceived(let lastStreamID, let errorCode, let debugData):
                    metrics.increment("goaways")
                    let reason = APNsErrorResponse(parsing: debugData).reason?.rawValue ?? String(decoding: debugData, as: UTF8.self)
                    recordFailure(on: connection)
                    retire(connection, cause: "goaway", because: "GOAWAY \(errorCode) last-stream-id \(lastStreamID) \(reason)")
                case .closed(let error):
                    retire(connection, cause: "closed", because: error.map { "closed: \($0)" } ?? "closed")
                }
            }
            retire(connection, cause: "closed", because: "closed")
        }
        await connection.ended.wait()
        events.cancel()
    }

    private func failWaitersIfNoConnection(_ error: any Error) {
        let waiters = state.withLock { state -> [Waiter] in
            guard state.slots.allSatisfy({ $0 == nil }) else { return [] }
            return state.removeAllWaiters()
        }
        let failure = HTTP2Error(.connectFailed, "no APNs connection to \(endpoint.host):\(endpoint.port) could be opened", cause: error)
        for waiter in waiters { waiter.continuation.resume(throwing: failure) }
    }

    // MARK: Health

    /// PINGs connections idle for `idlePingInterval` (a dead one is replaced) and watches the
    /// certificate's expiry.
    private func runHealthChecks() async {
        var lastCertificateCheck: ContinuousClock.Instant?
        while !Task.isCancelled {
            if lastCertificateCheck == nil || lastCertificateCheck!.duration(to: .now) > .seconds(3600) {
                lastCertificateCheck = .now
                checkCertificateExpiry()
            }
            if closeIfIdle() { return }
            let idle = state.withLock { state -> [PooledConnection] in
                let now = ContinuousClock.now
                var due: [PooledConnection] = []
                for case let connection? in state.slots where !connection.retired && !connection.pinging {
                    let due_: Bool
                    if connection.inFlight == 0 {
                        // Idle: a PING after `idlePingInterval` without traffic.
                        due_ = connection.lastActivity.duration(to: now) >= configuration.idlePingInterval
                    } else {
                        // Streams open but nothing heard for `pingTimeout`: is anyone there?
                        due_ = (connection.connection.timeSinceLastFrame ?? .zero) >= configuration.pingTimeout
                            && connection.lastActivity.duration(to: now) >= configuration.pingTimeout
                        // No new streams until the PING answers: a retry must not land on it too.
                        if due_ { connection.suspect = true }
                    }
                    if due_ {
                        connection.pinging = true
                        due.append(connection)
                    }
                }
                return due
            }
            for connection in idle {
                Task { await self.ping(connection) }
            }
            try? await Task.sleep(for: configuration.healthCheckInterval)
        }
    }

    /// Closes the pool's connections when nobody asked for a stream for `idleCloseAfter` and none is in
    /// flight or awaited: its slot and health tasks end, and the next ``acquire(waitingAtMost:)``
    /// starts them again (a new generation), opening connections lazily. Returns whether it closed.
    private func closeIfIdle() -> Bool {
        let after = configuration.idleCloseAfter
        guard after > .zero else { return false }
        let closed = state.withLock { state -> [PooledConnection]? in
            guard state.started, !state.shutDown, state.waiting == 0, state.lastUse.duration(to: .now) >= after,
                  state.slots.allSatisfy({ ($0?.inFlight ?? 0) == 0 })
            else { return nil }
            state.started = false
            let connections = state.slots.compactMap { $0 }
            for index in state.slots.indices { state.slots[index] = nil }
            return connections
        }
        guard let closed else { return false }
        metrics.increment("pools_closed_idle")
        logger.info("APNs pool idle: its connections close and reopen on the next send", [
            "idle_ms": "\(after.wholeMilliseconds)", "connections": "\(closed.count)",
        ])
        // Each slot task closes its retired connection gracefully, then ends (cancelled; nobody awaits
        // them here), as does this health task once it returns.
        for connection in closed {
            retire(connection, cause: "idle", because: "no send for \(after.wholeMilliseconds) ms")
        }
        let running = tasks.withLock { tasks in
            defer { tasks.removeAll() }
            return tasks
        }
        for task in running { task.cancel() }
        return true
    }

    private func ping(_ connection: PooledConnection) async {
        metrics.increment("pings")
        let answered = await Self.race(timeout: configuration.pingTimeout) {
            (try? await connection.connection.ping()) != nil
        }
        let wasSuspect = state.withLock { _ -> Bool in
            connection.pinging = false
            defer { connection.suspect = false }
            if answered { connection.lastActivity = .now }
            return connection.suspect
        }
        if answered {
            if wasSuspect { dispatch() }
            return
        }
        metrics.increment("ping_failures")
        metrics.pingFailures.increment(labels: environmentLabels)
        recordFailure(on: connection)
        retire(connection, cause: "ping_timeout", because: "PING not answered within \(configuration.pingTimeout.wholeMilliseconds) ms")
        // Dead: close at once so that its open streams fail now and are sent again elsewhere.
        connection.connection.abort(reason: "PING not answered within \(configuration.pingTimeout.wholeMilliseconds) ms")
    }

    /// `body`'s result, or false when `timeout` passes first (the body keeps running on its own).
    private static func race(timeout: Duration, _ body: @escaping @Sendable () async -> Bool) async -> Bool {
        let box = FirstResult()
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            box.set(continuation)
            Task { box.finish(await body()) }
            Task {
                try? await Task.sleep(for: timeout)
                box.finish(false)
            }
        }
    }

    private func checkCertificateExpiry() {
        guard case .certificate(let certificate) = credentials else { return }
        let days = Int(configuration.certificateExpiryWarning.components.seconds / 86_400)
        let remaining = certificate.notAfter - configuration.clock.nowSeconds()
        metrics.set("certificate_seconds_left_\(certificate.subjectUserID ?? "unknown")", Int(remaining))
        if certificate.expiresWithin(days: days, clock: configuration.clock) {
            metrics.increment("certificates_expiring")
            logger.warning("APNs certificate expires soon: renew and deploy it", [
                "subject": certificate.subject, "not_after": "\(certificate.notAfter)", "days_left": "\(remaining / 86_400)",
            ])
        }
    }
}

/// Resumes a continuation with the first value offered.
private final class FirstResult: Sendable {
    private let slot = Mutex<CheckedContinuation<Bool, Never>?>(nil)
    func set(_ continuation: CheckedContinuation<Bool, Never>) { slot.withLock { $0 = continuation } }
    func finish(_ value: Bool) {
        let continuation = slot.withLock { slot in
            defer { slot = nil }
            return slot
        }
        continuation?.resume(returning: value)
    }
}

