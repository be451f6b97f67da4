/// A JSON object: its members in document order (duplicates kept; the decoder reports them).
public struct JSONObject: Sendable, Hashable {
    /// One `"key": value` pair.
    public struct Member: Sendable, Hashable {
        /// The key, escapes resolved.
        public var key: String
        /// The value.
        public var value: JSONValue
        /// A member.
        public init(key: String, value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    /// The members in document order.
    public var members: [Member]

    /// An object with these members.
    public init(members: [Member] = []) { self.members = members }
}
