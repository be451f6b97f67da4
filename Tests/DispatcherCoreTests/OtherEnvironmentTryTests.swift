import PushDomain
import PushMessages
import ServiceCore
import Testing

@testable import DispatcherCore

/// The opt-in try on the other APNs environment after BadDeviceToken (docs/semantics.md "The other
/// environment after BadDeviceToken"): the decision, every input and every order of events, without I/O.
struct OtherEnvironmentTryTests {
    typealias Try = OtherEnvironmentTry

    static let scopes: [Try.RequestScope] = [.anyEnvironment, .only(.sandbox), .only(.production), .unknown]
    static let storedEnvironments: [APNsEnvironment?] = [nil, .sandbox, .production]

    /// Every refusal the dispatcher can describe: 2 × 2 × 2 × 4 × 3 = 96.
    static var allRefusals: [Try.Refusal] {
        var result: [Try.Refusal] = []
        for environment in APNsEnvironment.allCases {
            for optedIn in [false, true] {
                for configured in [false, true] {
                    for scope in scopes {
                        for stored in storedEnvironments {
                            result.append(Try.Refusal(
                                environment: environment, optedIn: optedIn, otherEnvironmentConfigured: configured,
                                scope: scope, storedEnvironment: stored))
                        }
                    }
                }
            }
        }
        return result
    }

    /// The rule as the docs table states it, written independently of the type: the first condition
    /// that fails names the deactivation; all holding, the other environment is tried.
    static func expected(_ refusal: Try.Refusal) -> Try.Action {
        let requestNamesOne: Bool = if case .only = refusal.scope { true } else { false }
        let conditions: [(holds: Bool, otherwise: Try.Deactivation)] = [
            (refusal.optedIn, .notOptedIn),
            (refusal.otherEnvironmentConfigured, .otherEnvironmentNotConfigured),
            (!requestNamesOne, .requestNamesEnvironment),
            (refusal.scope != .unknown, .requestUnknown),
            (refusal.storedEnvironment != nil, .tokenNotStored),
            (refusal.storedEnvironment == refusal.environment, .storedInOtherEnvironment),
        ]
        if let failed = conditions.first(where: { !$0.holds }) { return .deactivate(failed.otherwise) }
        return .send(to: refusal.environment == .sandbox ? .production : .sandbox)
    }

    @Test func everyRefusalIsDecidedAsTheRuleSays() {
        var tries = 0
        for refusal in Self.allRefusals {
            var decision = Try()
            let action = decision.handle(.badDeviceToken(refusal))
            #expect(action == Self.expected(refusal), "\(refusal)")
            if case .send(let other) = action {
                tries += 1
                #expect(other != refusal.environment)
                #expect(decision.state == .trying(from: refusal.environment, to: other))
            } else {
                #expect(decision.state == .settled)
            }
        }
        // Exactly the opted-in, configured, unrestricted refusals of an active row in the refused
        // environment: one per environment.
        #expect(tries == 2)
    }

    @Test func theOtherEnvironmentsAnswerCorrectsOrDeactivates() {
        for environment in APNsEnvironment.allCases {
            for answer in Try.Answer.allCases {
                var decision = Try()
                let first = decision.handle(.badDeviceToken(Try.Refusal(
                    environment: environment, optedIn: true, otherEnvironmentConfigured: true, scope: .anyEnvironment,
                    storedEnvironment: environment)))
                #expect(first == .send(to: environment.other))
                let second = decision.handle(.otherEnvironmentAnswered(answer))
                switch answer {
                case .accepted: #expect(second == .correctEnvironment(from: environment, to: environment.other))
                case .refused: #expect(second == .deactivate(.refusedThere))
                case .noAnswer: #expect(second == .deactivate(.noAnswerThere))
                }
                #expect(decision.state == .settled)
            }
        }
    }

    /// Whatever follows, there is never a second try and never a correction that was not earned.
    @Test func afterTheDecisionEveryEventDeactivates() {
        let later: [Try.Event] = Self.allRefusals.map { .badDeviceToken($0) } + Try.Answer.allCases.map { .otherEnvironmentAnswered($0) }
        // Settled at once (not opted in), settled after a try (each answer), and still trying.
        var starts: [Try] = []
        var notOptedIn = Try()
        _ = notOptedIn.handle(.badDeviceToken(Try.Refusal(
            environment: .production, optedIn: false, otherEnvironmentConfigured: true, scope: .anyEnvironment, storedEnvironment: .production)))
        starts.append(notOptedIn)
        for answer in Try.Answer.allCases {
            var tried = Try()
            _ = tried.handle(.badDeviceToken(Try.Refusal(
                environment: .production, optedIn: true, otherEnvironmentConfigured: true, scope: .anyEnvironment, storedEnvironment: .production)))
            _ = tried.handle(.otherEnvironmentAnswered(answer))
            starts.append(tried)
        }
        for start in starts {
            #expect(start.state == .settled)
            for event in later {
                var decision = start
                #expect(decision.handle(event) == .deactivate(.alreadySettled), "\(event)")
            }
        }
        // A second BadDeviceToken while the try is under way (the other environment's own refusal
        // must come as its answer) never starts another try.
        for refusal in Self.allRefusals {
            var trying = Try()
            _ = trying.handle(.badDeviceToken(Try.Refusal(
                environment: .sandbox, optedIn: true, otherEnvironmentConfigured: true, scope: .anyEnvironment, storedEnvironment: .sandbox)))
            #expect(trying.handle(.badDeviceToken(refusal)) == .deactivate(.alreadySettled))
            #expect(trying.state == .settled)
        }
        // An answer without a try earns nothing.
        for answer in Try.Answer.allCases {
            var waiting = Try()
            #expect(waiting.handle(.otherEnvironmentAnswered(answer)) == .deactivate(.alreadySettled))
        }
    }

    @Test func theRequestNamesTheEnvironmentsItReaches() {
        var request = SendRequest()
        var notification = Notification()
        notification.bundleID = "com.example.app"
        request.notification = notification
        request.target = .userIDs(UserIds())
        #expect(SendRequestProcessor.scope(of: request) == .anyEnvironment)
        request.notification?.environment = .sandbox
        #expect(SendRequestProcessor.scope(of: request) == .only(.sandbox))
        request.notification?.environment = .unspecified
        var audience = AppAudience()
        audience.environment = .production
        request.target = .audience(audience)
        #expect(SendRequestProcessor.scope(of: request) == .only(.production))
        audience.environment = .unspecified
        request.target = .audience(audience)
        #expect(SendRequestProcessor.scope(of: request) == .anyEnvironment)
    }

    // MARK: Settings

    @Test func theOptInListIsBundleIDsSeparatedByCommas() throws {
        #expect(try OtherEnvironmentRetrySettings.parseBundleIDs("com.a.app, com.b-app ,,com.a.app") == ["com.a.app", "com.b-app"])
        #expect(try OtherEnvironmentRetrySettings.parseBundleIDs("") == [])
        for bad in ["com.a app", "com.a=1", "*", "com.é"] {
            let error = #expect(throws: InvalidFieldError.self) {
                _ = try OtherEnvironmentRetrySettings.parseBundleIDs("com.ok,\(bad)")
            }
            let description = "\(error.map { "\($0)" } ?? "")"
            #expect(description.hasPrefix("PUSH_APNS_OTHER_ENVIRONMENT_RETRY: ") && description.contains(bad), "\(description)")
            #expect(description.contains("letters, digits, hyphens and periods"), "\(description)")
        }
    }

    @Test func anEnvironmentLeftAtApplesHostBesideAnOverriddenOneIsNotConfigured() {
        typealias S = OtherEnvironmentRetrySettings
        #expect(S.configuredEnvironments(productionURLSet: false, sandboxURLSet: false) == [.sandbox, .production])
        #expect(S.configuredEnvironments(productionURLSet: true, sandboxURLSet: true) == [.sandbox, .production])
        #expect(S.configuredEnvironments(productionURLSet: true, sandboxURLSet: false) == [.production])
        #expect(S.configuredEnvironments(productionURLSet: false, sandboxURLSet: true) == [.sandbox])
    }

    @Test func theLoaderValidatesAndWarnsWhenAnEnvironmentIsNotConfigured() throws {
        let both = EnvironmentConfig([
            "PUSH_APNS_OTHER_ENVIRONMENT_RETRY": "com.a.app,com.b.app",
            "PUSH_APNS_PRODUCTION_URL": "https://127.0.0.1:2197", "PUSH_APNS_SANDBOX_URL": "https://127.0.0.1:2198",
        ])
        let settings = try OtherEnvironmentRetrySettings.fromEnvironment(both)
        #expect(settings.bundleIDs == ["com.a.app", "com.b.app"] && settings.optedIn("com.a.app") && !settings.optedIn("com.c.app"))
        #expect(settings.configuredEnvironments == [.sandbox, .production] && both.warnings.isEmpty)

        let oneURL = EnvironmentConfig(["PUSH_APNS_OTHER_ENVIRONMENT_RETRY": "com.a.app", "PUSH_APNS_PRODUCTION_URL": "https://proxy:443"])
        #expect(try OtherEnvironmentRetrySettings.fromEnvironment(oneURL).configuredEnvironments == [.production])
        let warning = try #require(oneURL.warnings.first)
        #expect(oneURL.warnings.count == 1 && warning.variable == "PUSH_APNS_OTHER_ENVIRONMENT_RETRY")
        #expect(warning.problem.contains("PUSH_APNS_SANDBOX_URL is not") && warning.problem.contains("sandbox is not tried"))
        #expect(oneURL.checkReport(program: "dispatcher").contains("warning: PUSH_APNS_OTHER_ENVIRONMENT_RETRY: PUSH_APNS_PRODUCTION_URL is set"))

        // Nobody opted in: one URL set is nothing to warn about.
        let nobody = EnvironmentConfig(["PUSH_APNS_PRODUCTION_URL": "https://proxy:443"])
        #expect(try OtherEnvironmentRetrySettings.fromEnvironment(nobody).bundleIDs.isEmpty && nobody.warnings.isEmpty)

        // A bad bundle id is named; collecting, the report lists it and the rest still loads.
        #expect(throws: EnvironmentConfig.Error.self) {
            _ = try OtherEnvironmentRetrySettings.fromEnvironment(EnvironmentConfig(["PUSH_APNS_OTHER_ENVIRONMENT_RETRY": "com.a app"]))
        }
        let collecting = EnvironmentConfig(["PUSH_APNS_OTHER_ENVIRONMENT_RETRY": "com.a app"], collectingErrors: true)
        #expect(try OtherEnvironmentRetrySettings.fromEnvironment(collecting).bundleIDs.isEmpty)
        #expect(collecting.errors.map(\.variable) == ["PUSH_APNS_OTHER_ENVIRONMENT_RETRY"])
    }
}
