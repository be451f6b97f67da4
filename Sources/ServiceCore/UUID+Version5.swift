import Foundation

extension UUID {
    /// The name-based, SHA-1 UUID (version 5) of `name` in `namespace` (RFC 9562 §5.5): the first
    /// 16 bytes of SHA-1(namespace's 16 bytes ‖ name's UTF-8), with the version nibble set to 5 and
    /// the variant bits to `10` (RFC 9562 §4.1, §4.2).
    ///
    /// The same namespace and name always give the same UUID; Python's `uuid.uuid5(namespace, name)`
    /// computes the same value.
    /// - Parameters:
    ///   - namespace: the namespace UUID, e.g. RFC 9562 §6.6's DNS namespace
    ///     `6ba7b810-9dad-11d1-80b4-00c04fd430c8`.
    ///   - name: the name, hashed as UTF-8 without normalization.
    /// - Returns: the version 5 UUID.
    public static func v5(namespace: UUID, name: String) -> UUID {
        // One buffer for the namespace's 16 bytes and the name (one per notification: no copies).
        var message = [UInt8]()
        message.reserveCapacity(16 + name.utf8.count)
        withUnsafeBytes(of: namespace.uuid) { message.append(contentsOf: $0) }
        message.append(contentsOf: name.utf8)
        var hash = Digest.sha1(message)
        hash[6] = (hash[6] & 0x0F) | 0x50  // version 5
        hash[8] = (hash[8] & 0x3F) | 0x80  // variant 10xx (RFC 9562)
        return UUID(uuid: (
            hash[0], hash[1], hash[2], hash[3], hash[4], hash[5], hash[6], hash[7],
            hash[8], hash[9], hash[10], hash[11], hash[12], hash[13], hash[14], hash[15]))
    }
}
