/// A long-running part of a process (a server, a consumer loop, a producer) that a `ServiceGroup`
/// runs, shuts down gracefully and, only when that takes too long, cancels.
///
/// Start resources (sockets, threads, librdkafka handles) inside `run(shutdown:)`, not in an
/// initializer, and release them before it returns.
public protocol Service: Sendable {
    /// Runs until its work ends.
    ///
    /// When `shutdown` triggers: stop taking new work, finish what is in progress, return normally.
    /// Cancellation of the calling task (escalation) means: stop now, abandoning work in progress.
    /// Returning or throwing before any shutdown makes the group shut down every other service.
    /// - Parameter shutdown: the group's graceful-shutdown trigger, shared by all its services.
    /// - Throws: any error that ends the service; the group rethrows the first one from `run()`.
    func run(shutdown: GracefulShutdown) async throws
}
