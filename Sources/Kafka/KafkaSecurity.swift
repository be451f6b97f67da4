import Foundation
import ServiceCore

/// How a client authenticates to the brokers and protects the connection: librdkafka's
/// `security.protocol`, `sasl.mechanisms`, `sasl.username`, `sasl.password` and `ssl.ca.location`,
/// plus any other librdkafka property passed through (librdkafka 2.0.2 CONFIGURATION.md).
///
/// `properties` goes into a client's `additionalProperties`. Every service and `pushctl` read it from
/// the same variables (`KafkaSecurity(environment:)`).
public struct KafkaSecurity: Sendable, Equatable {
    /// Kafka's `security.protocol` values.
    public enum SecurityProtocol: String, Sendable, CaseIterable {
        /// No TLS, no authentication (`plaintext`).
        case plaintext
        /// TLS (`ssl`).
        case ssl
        /// SASL without TLS (`sasl_plaintext`).
        case saslPlaintext = "sasl_plaintext"
        /// SASL over TLS (`sasl_ssl`).
        case saslSSL = "sasl_ssl"

        /// Whether SASL credentials are used.
        public var usesSASL: Bool { self == .saslPlaintext || self == .saslSSL }
        /// Whether the connection is TLS.
        public var usesTLS: Bool { self == .ssl || self == .saslSSL }
    }

    /// The SASL mechanisms this project supports with a user name and password (`sasl.mechanisms`).
    public enum SASLMechanism: String, Sendable, CaseIterable {
        /// `PLAIN`: the password travels in the clear inside the connection (use with `sasl_ssl`).
        case plain = "PLAIN"
        /// `SCRAM-SHA-256` (RFC 7677).
        case scramSHA256 = "SCRAM-SHA-256"
        /// `SCRAM-SHA-512` (RFC 5802 with SHA-512).
        case scramSHA512 = "SCRAM-SHA-512"
    }

    /// `security.protocol`. Default `.plaintext`.
    public var securityProtocol: SecurityProtocol = .plaintext
    /// `sasl.mechanisms`, required with a SASL protocol.
    public var saslMechanism: SASLMechanism? = nil
    /// `sasl.username`.
    public var saslUsername: String? = nil
    /// `sasl.password` (never printed).
    public var saslPassword: String? = nil
    /// `ssl.ca.location`: a PEM file of the CAs that signed the brokers' certificates (default: the
    /// system's trust store).
    public var caFile: String? = nil
    /// Further librdkafka properties, applied after the fields above (for example
    /// `ssl.endpoint.identification.algorithm` or `ssl.certificate.location` for mutual TLS).
    public var passThrough: [String: String] = [:]

    /// Plaintext, no credentials.
    public init() {}

    /// The librdkafka properties to add to a client's `additionalProperties`.
    public var properties: [String: String] {
        var list: [String: String] = ["security.protocol": securityProtocol.rawValue]
        if let saslMechanism { list["sasl.mechanisms"] = saslMechanism.rawValue }
        if let saslUsername { list["sasl.username"] = saslUsername }
        if let saslPassword { list["sasl.password"] = saslPassword }
        if let caFile { list["ssl.ca.location"] = caFile }
        list.merge(passThrough) { $1 }
        return list
    }

    /// The librdkafka property a pass-through variable names: `PUSH_KAFKA_PROPERTY_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM`
    /// → `ssl.endpoint.identification.algorithm` (the suffix lowercased, `_` → `.`; librdkafka's
    /// property names use only dots).
    public static func propertyName(ofVariable variable: String) -> String? {
        guard variable.hasPrefix(passThroughPrefix), variable.count > passThroughPrefix.count else { return nil }
        return variable.dropFirst(passThroughPrefix.count).lowercased().replacingOccurrences(of: "_", with: ".")
    }

    /// The prefix of pass-through variables.
    public static let passThroughPrefix = "PUSH_KAFKA_PROPERTY_"
}

extension KafkaSecurity {
    /// Reads the security settings every client of this project shares:
    ///
    /// | variable | property | default |
    /// |---|---|---|
    /// | `PUSH_KAFKA_SECURITY_PROTOCOL` | `security.protocol` | `plaintext` |
    /// | `PUSH_KAFKA_SASL_MECHANISM` | `sasl.mechanisms` | required with `sasl_*` |
    /// | `PUSH_KAFKA_SASL_USERNAME` | `sasl.username` | required with `sasl_*` |
    /// | `PUSH_KAFKA_SASL_PASSWORD_FILE` | `sasl.password` (the file's text) | required with `sasl_*` |
    /// | `PUSH_KAFKA_CA_FILE` | `ssl.ca.location` | system trust store |
    /// | `PUSH_KAFKA_PROPERTY_<NAME>` | `<name>` (lowercase, `_` → `.`) | |
    ///
    /// Each pass-through property is checked by librdkafka itself (`rd_kafka_conf_set`), so a
    /// misspelt name or a bad value is named before the client starts.
    /// - Throws: `EnvironmentConfig.Error` naming the bad variable (collected instead when `environment`
    ///   collects errors).
    public init(environment env: EnvironmentConfig) throws {
        self.init()
        securityProtocol = try env.choice(
            "PUSH_KAFKA_SECURITY_PROTOCOL", default: .plaintext,
            ["plaintext": .plaintext, "ssl": .ssl, "sasl_plaintext": .saslPlaintext, "sasl_ssl": .saslSSL])
        caFile = env.string("PUSH_KAFKA_CA_FILE")
        if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            try env.fail("PUSH_KAFKA_CA_FILE", "cannot read \(caFile)")
        }
        if securityProtocol.usesSASL {
            saslMechanism = try env.choice(
                "PUSH_KAFKA_SASL_MECHANISM", default: nil,
                ["PLAIN": .plain, "SCRAM-SHA-256": .scramSHA256, "SCRAM-SHA-512": .scramSHA512])
            if saslMechanism == nil, env.string("PUSH_KAFKA_SASL_MECHANISM") == nil {
                try env.fail("PUSH_KAFKA_SASL_MECHANISM", "is required with PUSH_KAFKA_SECURITY_PROTOCOL=\(securityProtocol.rawValue) (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
            }
            saslUsername = try env.required("PUSH_KAFKA_SASL_USERNAME")
            if env.string("PUSH_KAFKA_SASL_PASSWORD_FILE") == nil {
                try env.fail("PUSH_KAFKA_SASL_PASSWORD_FILE", "is required with PUSH_KAFKA_SECURITY_PROTOCOL=\(securityProtocol.rawValue)")
            } else {
                saslPassword = try env.fileContents("PUSH_KAFKA_SASL_PASSWORD_FILE")
            }
        } else {
            for name in ["PUSH_KAFKA_SASL_MECHANISM", "PUSH_KAFKA_SASL_USERNAME", "PUSH_KAFKA_SASL_PASSWORD_FILE"] where env.string(name) != nil {
                try env.fail(name, "is set but PUSH_KAFKA_SECURITY_PROTOCOL=\(securityProtocol.rawValue) uses no SASL (sasl_plaintext or sasl_ssl)")
            }
        }
        for (variable, value) in env.variables(withPrefix: Self.passThroughPrefix) {
            guard let property = Self.propertyName(ofVariable: variable) else { continue }
            if let problem = KafkaLibrary.checkProperty(property, value) {
                try env.fail(variable, problem)
            } else {
                passThrough[property] = value
            }
        }
    }
}
