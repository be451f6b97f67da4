import Synchronization

/// The standard gRPC health service, `grpc.health.v1.Health` (Check and Watch), as specified in
/// https://github.com/grpc/grpc/blob/master/doc/health-checking.md and Protos/grpc/health/v1/health.proto.
///
/// The server as a whole has the service name `""`; other names are the services registered with
/// `init(services:)`. Check answers a known service's status, NOT_FOUND for an unknown one. Watch
/// sends the current status at once, then every change, until the client ends the call or the
/// server shuts down; an unknown service is watched as `SERVICE_UNKNOWN` (not an error). Both are
/// meant to be served without authentication (probes carry no credentials).
public final class GRPCHealthService: Sendable {
    /// A service's serving status.
    public enum Status: Sendable, Equatable {
        /// Ready to serve.
        case serving
        /// Not ready (a dependency is down, or the server is shutting down).
        case notServing
    }

    private struct State {
        var statuses: [String: Status]
        var watchers: [UInt64: (service: String, continuation: AsyncStream<HealthCheckResponse.ServingStatus>.Continuation)] = [:]
        var nextWatcher: UInt64 = 0
        var shuttingDown = false
    }

    private let state: Mutex<State>

    /// - Parameters:
    ///   - services: fully qualified names of the services to report besides the server (`""`).
    ///   - initial: the status every one starts with.
    public init(services: [String], initial: Status = .notServing) {
        var statuses: [String: Status] = ["": initial]
        for service in services { statuses[service] = initial }
        state = Mutex(State(statuses: statuses))
    }

    /// Sets the status of `service` (`""`: the server and every registered service) and tells its
    /// watchers when it changed. Ignored after `enterShutdown()`.
    public func setStatus(_ status: Status, for service: String = "") {
        let notify = state.withLock { state -> [(AsyncStream<HealthCheckResponse.ServingStatus>.Continuation)] in
            guard !state.shuttingDown else { return [] }
            let names = service.isEmpty ? Array(state.statuses.keys) : [service]
            var changed = Set<String>()
            for name in names where state.statuses[name] != status {
                state.statuses[name] = status
                changed.insert(name)
            }
            return state.watchers.values.filter { changed.contains($0.service) }.map(\.continuation)
        }
        for continuation in notify { continuation.yield(Self.wire(status)) }
    }

    /// The status of `service`, or nil when it is not known.
    public func status(of service: String = "") -> Status? {
        state.withLock { $0.statuses[service] }
    }

    /// Marks every service NOT_SERVING for good, sends that to the watchers and ends their calls
    /// (OK), so that a graceful server shutdown does not wait for them.
    public func enterShutdown() {
        let watchers = state.withLock { state in
            state.shuttingDown = true
            for name in state.statuses.keys { state.statuses[name] = .notServing }
            defer { state.watchers.removeAll() }
            return Array(state.watchers.values)
        }
        for watcher in watchers {
            watcher.continuation.yield(.notServing)
            watcher.continuation.finish()
        }
    }

    /// Adds Check and Watch to `router`.
    public func register(into router: inout GRPCRouter) {
        router.register(Health.Check.self) { [self] request, _ in
            guard let status = status(of: request.service) else {
                throw GRPCStatus(.notFound, "unknown service \(request.service)")
            }
            return HealthCheckResponse(status: Self.wire(status))
        }
        router.registerStreaming(Health.Watch.self) { [self] requests, _, responses in
            let service = requests.first?.service ?? ""
            let (stream, continuation) = AsyncStream.makeStream(of: HealthCheckResponse.ServingStatus.self, bufferingPolicy: .bufferingNewest(8))
            let (id, current) = state.withLock { state -> (UInt64?, HealthCheckResponse.ServingStatus) in
                let current = state.statuses[service].map(Self.wire) ?? .serviceUnknown
                guard !state.shuttingDown else { return (nil, current) }
                state.nextWatcher += 1
                state.watchers[state.nextWatcher] = (service, continuation)
                return (state.nextWatcher, current)
            }
            responses.send(HealthCheckResponse(status: current))
            guard let id else { return }
            defer { _ = state.withLock { $0.watchers.removeValue(forKey: id) } }
            var last = current
            await withTaskCancellationHandler {
                for await status in stream where status != last {
                    last = status
                    responses.send(HealthCheckResponse(status: status))
                }
            } onCancel: {
                continuation.finish()
            }
        }
    }

    private static func wire(_ status: Status) -> HealthCheckResponse.ServingStatus {
        status == .serving ? .serving : .notServing
    }
}
