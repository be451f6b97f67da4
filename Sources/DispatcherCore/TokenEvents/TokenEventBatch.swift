import PushDomain
import PushMessages

/// Token events, in offset order, split into layers that `TokenStore.apply(_:)` can each write with
/// one statement per action, with the same result as applying the events one by one.
///
/// ## Why layers, and why they are exact
///
/// Two events *conflict* when they name the same token, or when both are registrations with the same
/// replacement key (bundle id, installation id, token kind). Each event goes into the layer after
/// the last layer holding an event it conflicts with (layer 0 when there is none), so within a layer
/// no token and no replacement key appears twice, and every conflicting pair keeps its order.
/// Running the layers in order is therefore the original sequence with only non-conflicting
/// neighbours swapped, and two non-conflicting events give the same table in either order:
///
/// - Their upserts touch different rows (different tokens), so PostgreSQL never has to update one
///   row twice in one `ON CONFLICT DO UPDATE` (which it refuses).
/// - A replacement (registration R with key K deactivates the other *active* rows of K whose last
///   event is older than R) can meet the other event E's row only when that row had key K before E.
///   If E is an unregistration it leaves the row inactive either way: inactive rows are not
///   replaced, and when E applies, its values (`unregistered`, E's time) overwrite a replacement's.
///   If E is a registration, its key is not K (else they conflict): when E applies, it moves the row
///   out of K and makes it active with no inactive reason in either order. That holds because an
///   active row always has `apns_invalidated_at_ms` older than its last event (a row becomes active
///   only through a registration newer than Apple's invalidation, and an invalidation deactivates
///   it), so E, newer than the last event, always reactivates it after a replacement. When E does
///   not apply, the row keeps key K and the same age in both orders.
/// - Each layer's replacement runs after that layer's upserts, as its own statement, so it sees the
///   rows they wrote; the keys in one layer are distinct, so replacements touch disjoint rows.
///
/// Installation replacement is scoped to the registration's user (only rows with the same `user_id`,
/// or both none, are replaced). The argument above holds unchanged: the user id is a column the
/// other event's registration overwrites, so it moves the row out of the replaced set exactly as a
/// new key does, in either order.
///
/// Two kinds of events touch rows that no token or key names, and are applied *alone*, in a layer
/// of their own after every earlier event and before every later one (a barrier): a registration with
/// a `previous_token` (it also deactivates that token's row) and a `USER_FORGOTTEN` event (every row
/// of a user). Both are rare, so exactness costs almost nothing.
///
/// Collapsing repeated tokens to their newest event instead would not be exact: an older
/// registration of the token with another installation id can still replace that installation's
/// older tokens when applied one by one, and the newest event alone would not.
struct TokenEventBatch: Sendable, Equatable {
    /// A registration as the table stores it.
    struct Registration: Sendable, Hashable {
        var token: String
        var bundleID: String
        /// `sandbox` or `production`.
        var environment: String
        /// `APNsTokenKind` raw value.
        var kind: String
        /// Empty when none (stored as NULL).
        var userID: String
        /// Empty when none (stored as NULL).
        var installationID: String
        /// ms since the UNIX epoch.
        var eventTimeMs: Int64
        /// A JSON object.
        var attributes: String
        /// The token this registration replaces (lowercase hex); empty when none.
        var previousToken: String = ""

        /// The tokens this registration replaces share this key; `nil` without an installation id.
        var replacementKey: ReplacementKey? {
            installationID.isEmpty ? nil : ReplacementKey(bundleID: bundleID, installationID: installationID, kind: kind)
        }

        init(token: String, bundleID: String, environment: String, kind: String, userID: String = "",
             installationID: String = "", eventTimeMs: Int64, attributes: String = "{}", previousToken: String = "") {
            self.token = token
            self.bundleID = bundleID
            self.environment = environment
            self.kind = kind
            self.userID = userID
            self.installationID = installationID
            self.eventTimeMs = eventTimeMs
            self.attributes = attributes
            self.previousToken = previousToken
        }

        init(_ device: Device, at eventTimeMs: Int64, previousToken: String = "") {
            self.init(
                token: device.deviceToken, bundleID: device.bundleID,
                environment: device.environment == .sandbox ? "sandbox" : "production",
                kind: device.kind.storedName ?? APNsTokenKind.standard.rawValue,
                userID: device.userID, installationID: device.installationID, eventTimeMs: eventTimeMs,
                attributes: TokenStore.jsonObject(device.attributes), previousToken: previousToken)
        }
    }

    /// A forgotten user of one app: every row of (bundle id, user id) older than the event.
    struct Forget: Sendable, Hashable {
        var bundleID: String
        var userID: String
        /// ms since the UNIX epoch.
        var eventTimeMs: Int64
    }

    /// An unregistration: only the token, its bundle id (checked against the row's) and the time.
    struct Unregistration: Sendable, Hashable {
        var token: String
        var bundleID: String
        /// ms since the UNIX epoch.
        var eventTimeMs: Int64
    }

    /// Bundle id, installation id and token kind: a registration replaces the older active tokens
    /// with the same key.
    struct ReplacementKey: Sendable, Hashable {
        var bundleID: String
        var installationID: String
        var kind: String
    }

    /// Events that conflict with no other event of the same layer, in offset order within the layer.
    struct Layer: Sendable, Equatable {
        var registrations: [Registration] = []
        var unregistrations: [Unregistration] = []
        /// Only in a barrier layer, alone.
        var forgets: [Forget] = []

        var isEmpty: Bool { registrations.isEmpty && unregistrations.isEmpty && forgets.isEmpty }
        var count: Int { registrations.count + unregistrations.count + forgets.count }
    }

    /// The layers, to apply in order.
    private(set) var layers: [Layer] = []

    /// Splits `events` (offset order). Events without a device and actions other than registered,
    /// unregistered and user forgotten change nothing, as in `TokenStore.apply(_:)` for one event,
    /// and are dropped.
    init(_ events: some Sequence<TokenEvent>) {
        var lastLayerOfToken: [String: Int] = [:]
        var lastLayerOfKey: [ReplacementKey: Int] = [:]
        // No event goes below this layer: the layer after the last barrier.
        var floor = 0
        for event in events {
            guard let device = event.device else { continue }
            switch event.action {
            case .registered where !event.previousToken.isEmpty:
                let layer = layers.count
                place(layer) { $0.registrations.append(Registration(device, at: event.eventTimeMs, previousToken: event.previousToken)) }
                floor = layer + 1
            case .userForgotten:
                let layer = layers.count
                place(layer) { $0.forgets.append(Forget(bundleID: device.bundleID, userID: device.userID, eventTimeMs: event.eventTimeMs)) }
                floor = layer + 1
            case .registered:
                let registration = Registration(device, at: event.eventTimeMs)
                let key = registration.replacementKey
                var layer = max(floor, lastLayerOfToken[registration.token].map { $0 + 1 } ?? 0)
                if let key, let keyLayer = lastLayerOfKey[key] { layer = max(layer, keyLayer + 1) }
                place(layer) { $0.registrations.append(registration) }
                lastLayerOfToken[registration.token] = layer
                if let key { lastLayerOfKey[key] = layer }
            case .unregistered:
                let unregistration = Unregistration(token: device.deviceToken, bundleID: device.bundleID, eventTimeMs: event.eventTimeMs)
                let layer = max(floor, lastLayerOfToken[unregistration.token].map { $0 + 1 } ?? 0)
                place(layer) { $0.unregistrations.append(unregistration) }
                lastLayerOfToken[unregistration.token] = layer
            default:
                continue
            }
        }
    }

    private mutating func place(_ layer: Int, _ add: (inout Layer) -> Void) {
        while layers.count <= layer { layers.append(Layer()) }
        add(&layers[layer])
    }

    /// The number of events that can change the table.
    var eventCount: Int { layers.reduce(0) { $0 + $1.count } }
}
