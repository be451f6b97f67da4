import Foundation

extension APNsSimulator.TrustedKey {
    /// The error for a malformed `PUSH_SIM_KEYS` entry.
    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Parses `KEYID:TEAMID:/path/to/public-key.pem` entries separated by commas, reading each file.
    /// - Throws: `ParseError` naming the entry that is malformed or whose file cannot be read.
    public static func parseList(_ text: String) throws -> [APNsSimulator.TrustedKey] {
        try text.split(separator: ",").map { entry in
            let parts = entry.split(separator: ":", maxSplits: 2).map(String.init)
            guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw ParseError(description: "trusted key \"\(entry)\": expected KEYID:TEAMID:/path/to/public-key.pem")
            }
            guard let pem = try? String(contentsOfFile: parts[2], encoding: .utf8) else {
                throw ParseError(description: "trusted key \(parts[0]): cannot read \(parts[2])")
            }
            return APNsSimulator.TrustedKey(keyID: parts[0], teamID: parts[1], publicKeyPEM: pem)
        }
    }
}
