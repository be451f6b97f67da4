/// Admission by the app's token bucket (`AppRateLimiter`, docs/campaigns.md): a notification that
/// goes to Apple waits for its app's next token; settlements do not. On failure while waiting, the
/// permit taken by earlier policies is given back.
struct AppRateLimitPolicy: AdmissionPolicy {
    let limiter: AppRateLimiter

    func admit(_ candidate: AdmissionCandidate, permit: NotificationPermit) async throws -> AdmissionVerdict {
        guard candidate.sends else { return .admit }
        do {
            try await limiter.acquire(candidate.bundleID)
        } catch {
            permit.release()
            throw error
        }
        return .admit
    }
}
