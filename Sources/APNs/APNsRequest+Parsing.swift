import PushDomain
extension APNsRequest {
    /// Parses an incoming HTTP/2 device-push request the way APNs does (for the simulator), refusing
    /// it with Apple's reason and status (docs/apns-protocol.md §2).
    ///
    /// Checks, in order: a repeated header → `DuplicateHeaders`; `:method` not POST → 405
    /// `MethodNotAllowed`; `:path` not `/3/device/…` → 404 `BadPath`; no token → `MissingDeviceToken`;
    /// a malformed token → `BadDeviceToken`; `apns-push-type` unknown → `InvalidPushType` (absent means
    /// `alert`); `apns-topic` absent and no `defaultTopic` → `MissingTopic`; `apns-priority` not an
    /// integer → `BadPriority`; `apns-expiration` not decimal seconds → `BadExpirationDate`; `apns-id`
    /// not a UUID → `BadMessageId`. Body and value rules are ``APNsNotificationValidator``'s; run
    /// ``APNsNotificationValidator/appleChecksOnly`` on the result. `authorization` is not read here.
    /// - Parameters:
    ///   - headers: the whole header block, pseudo-headers included, names in lowercase.
    ///   - body: the request body bytes.
    ///   - defaultTopic: the topic when `apns-topic` is absent (a single-topic certificate's bundle ID).
    /// - Throws: `APNsError` `.invalidRequest` (or `.invalidDeviceToken`) whose `reason` is Apple's;
    ///   `reason.httpStatus` is the status to answer with.
    public init(
        parsingHeaders headers: [(name: String, value: String)], body: [UInt8], defaultTopic: String? = nil
    ) throws(APNsError) {
        var fields: [String: String] = [:]
        for (name, value) in headers {
            guard fields.updateValue(value, forKey: name.lowercased()) == nil else {
                throw .rejected(.duplicateHeaders, "header \(name) is repeated")
            }
        }
        guard fields[":method"] == "POST" else {
            throw .rejected(.methodNotAllowed, ":method \(fields[":method"] ?? "(none)") is not POST")
        }
        let path = fields[":path"] ?? ""
        let prefix = "/3/device/"
        guard path.hasPrefix(prefix) else { throw .rejected(.badPath, ":path \(path) is not /3/device/<token>") }
        let tokenText = String(path.dropFirst(prefix.count))
        guard !tokenText.isEmpty else { throw .rejected(.missingDeviceToken, ":path has no device token") }
        let token: DeviceToken
        do throws(PushDomainError) { token = try DeviceToken(validating: tokenText) } catch { throw APNsError(error) }
        var pushType = APNsPushType.alert
        if let value = fields["apns-push-type"] {
            guard let parsed = APNsPushType(rawValue: value) else {
                throw .rejected(.invalidPushType, "apns-push-type \"\(value)\" is not a push type")
            }
            pushType = parsed
        }
        guard let topic = fields["apns-topic"] ?? defaultTopic else {
            throw .rejected(.missingTopic, "apns-topic is required")
        }
        var priority: APNsPriority?
        if let value = fields["apns-priority"] {
            guard let number = Int(value) else { throw .rejected(.badPriority, "apns-priority \"\(value)\" is not 10, 5 or 1") }
            priority = APNsPriority(rawValue: number)
        }
        let expiration = try APNsExpiration(headerValue: fields["apns-expiration"])
        let apnsID = try fields["apns-id"].map { text throws(APNsError) in
            do throws(PushDomainError) { return try APNsID(validating: text) } catch { throw APNsError(error) }
        }
        self.init(
            deviceToken: token, topic: topic, pushType: pushType, priority: priority, expiration: expiration,
            collapseID: fields["apns-collapse-id"], apnsID: apnsID, payload: body)
    }
}
