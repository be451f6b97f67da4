import APNs
import ProtobufCodec
import PushDomain
import ServiceCore

/// The `apns-collapse-id` the dispatcher gives an alert push whose caller set none, so that a copy
/// sent again after a crash (docs/semantics.md "Crash duplicates") replaces the first in
/// Notification Center instead of showing twice, while the first is still shown.
///
/// The id is the first 16 bytes of SHA-256 of the request id's UTF-8 bytes, in base64url without
/// padding: 22 characters, far below Apple's 64-byte limit, the same for every copy of one request and
/// different between requests. It does not help when the user already dismissed the first copy (the
/// second then shows), nor for background, VoIP, Live Activity or other push types, which are not
/// shown in Notification Center (Apple: "apns-collapse-id … multiple notifications with the same
/// collapse identifier are displayed to the user as a single notification").
enum RequestCollapseID {
    /// The derived id for `requestID`.
    static func derived(requestID: String) -> String {
        Base64.encodeURL(Array(Digest.sha256(Array(requestID.utf8)).prefix(16)))
    }

    /// The collapse id a request's notification goes out with: the caller's when set; else, for an
    /// `alert` push that did not opt out (`no_request_collapse_id`), the derived one; else none.
    static func collapseID(caller: String?, pushType: APNsPushType, optedOut: Bool, requestID: String) -> String? {
        if let caller { return caller }
        guard pushType == .alert, !optedOut else { return nil }
        return derived(requestID: requestID)
    }
}
