/// The `apns-priority` header value.
///
/// Apple defines 10 (deliver immediately), 5 (deliver based on the device's power considerations) and
/// 1 (power considerations first, never wake the device); APNs's default is 10 and any other value gets
/// 400 `BadPriority` (docs/apns-protocol.md §2). Any integer can be held so that a bad value can be
/// represented and refused by ``APNsNotificationValidator``.
public struct APNsPriority: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The header's integer value.
    public let rawValue: Int

    /// Wraps `rawValue` without checking it (see ``isValid``).
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// 10: deliver immediately (APNs's default).
    public static let immediately = APNsPriority(rawValue: 10)
    /// 5: deliver based on the device's power considerations; the only priority for `background`.
    public static let consideringDevicePower = APNsPriority(rawValue: 5)
    /// 1: the device's power considerations over all else; never wakes the device.
    public static let prioritizingDevicePower = APNsPriority(rawValue: 1)

    /// True for 10, 5 and 1, the values Apple accepts.
    public var isValid: Bool { rawValue == 10 || rawValue == 5 || rawValue == 1 }

    /// The decimal header value.
    public var description: String { String(rawValue) }
}
