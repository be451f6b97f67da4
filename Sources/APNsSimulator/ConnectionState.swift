import PushDomain
import ServiceCore
import APNs
import Foundation
import HTTP2
import Synchronization

/// What the simulator remembers about one push connection: its authentication (the provider token
/// in use, the key and team bound by its first push, or its certificate), its stream count, whether
/// it is trusted yet (SETTINGS_MAX_CONCURRENT_STREAMS raised), and its random generator.
///
/// Requests of one connection arrive on one event-loop thread, but timers (GOAWAY every T, the
/// SETTINGS schedule) and delayed answers run elsewhere, so the mutable part sits in a `Mutex` that
/// is uncontended in practice.
final class ConnectionState: Sendable {
    struct Fields {
        /// Requests seen on this connection.
        var streams = 0
        /// True once SETTINGS_MAX_CONCURRENT_STREAMS was raised from the initial value.
        var trusted = false
        /// The limit announced once trusted (from the faults, then the schedule).
        var limit: UInt32
        /// The accepted provider token (compact JWT) and what verifying it gave.
        var jwt: Substring?
        var verified: APNsVerifiedJWT?
        /// When `jwt` was installed on this connection, ms since the epoch (the 20-minute rule).
        var installedAtMilliseconds: Int64 = 0
        /// The Key ID bound by the first successful token check (`UnrelatedKeyIdInToken` after it).
        var boundKeyID: String?
        /// The bundle IDs the bound key covered at the first push (topic-specific keys); nil = all.
        var boundTopics: Set<String>?
        var rng = SplitMix64()
        var goAwaySent = false
        /// The highest stream id handed to the request handler so far.
        var maxStreamID: Int32 = 0
        /// The last-stream-id of the GOAWAY sent: streams above it are not processed (RFC 9113 §6.8).
        var goAwayLastStreamID: Int32?
    }

    /// The key in `SimulatorState`'s connection table: environment bit and connection id.
    let key: UInt64
    let connection: HTTP2ServerConnection
    let environment: APNsEnvironment
    /// The verified client certificate's identity; nil on token-auth connections.
    let certificate: CertificateIdentity?
    let fields: Mutex<Fields>

    init(key: UInt64, connection: HTTP2ServerConnection, environment: APNsEnvironment, limit: UInt32) {
        self.key = key
        self.connection = connection
        self.environment = environment
        self.certificate = connection.peerCertificate.map(CertificateIdentity.init)
        self.fields = Mutex(Fields(limit: limit))
    }

    static func key(environment: APNsEnvironment, connectionID: UInt64) -> UInt64 {
        (environment == .production ? 1 << 63 : 0) | connectionID
    }

    /// Marks the connection trusted and announces its limit (once).
    func trust() {
        let limit: UInt32? = fields.withLock { fields in
            guard !fields.trusted else { return nil }
            fields.trusted = true
            return fields.limit
        }
        if let limit { connection.setMaxConcurrentStreams(limit) }
    }

    /// A SETTINGS schedule step: remembered, and announced at once when the connection is trusted.
    func applyScheduledLimit(_ value: UInt32) {
        let announce = fields.withLock { fields in
            fields.limit = value
            return fields.trusted
        }
        if announce { connection.setMaxConcurrentStreams(value) }
    }

    /// Sends GOAWAY with APNs's JSON debug data, once per connection; false when already sent.
    @discardableResult
    func goAway(lastStreamID: Int32?, reason: String, errorCode: UInt32) -> Bool {
        // The last-stream-id covers every stream handled so far (RFC 9113 §6.8: the highest stream
        // the sender "might have taken some action on"); later streams are left unprocessed.
        let last: Int32? = fields.withLock { fields in
            guard !fields.goAwaySent else { return nil }
            fields.goAwaySent = true
            let last = max(lastStreamID ?? 0, fields.maxStreamID)
            fields.goAwayLastStreamID = last
            return last
        }
        guard let last else { return false }
        connection.sendGoAway(
            lastStreamID: last, errorCode: HTTP2ErrorCode(rawValue: errorCode),
            debugData: APNsErrorResponse(reason: APNsReason(rawValue: reason)).body)
        return true
    }

    /// Starts the per-connection timers of `faults` (GOAWAY every T, the SETTINGS schedule);
    /// `sentGoAway` runs after a timer sent GOAWAY.
    func startTimers(_ faults: APNsSimulatorFaults, sentGoAway: @escaping @Sendable () -> Void) {
        for step in faults.maxConcurrentStreamsSchedule {
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(step.after.wholeMilliseconds))) { [weak self] in
                self?.applyScheduledLimit(step.value)
            }
        }
        if let goAway = faults.goAway, let every = goAway.every {
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(every.wholeMilliseconds))) { [weak self] in
                if self?.goAway(lastStreamID: nil, reason: goAway.reason, errorCode: goAway.errorCode) == true { sentGoAway() }
            }
        }
    }
}
