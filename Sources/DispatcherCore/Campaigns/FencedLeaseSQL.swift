import Postgres

/// The SQL of the fenced lease (docs/campaigns.md "Lease and fencing"), one mechanism for every
/// leased row: `campaigns` rows and the maintenance jobs' `job_leases` rows (docs/token-hygiene.md).
/// A leased table has the columns `lease_owner text`, `lease_generation bigint` and
/// `lease_expires_at timestamptz`; every time is the database's `now()`, and every holder write is
/// conditioned on `held`, so a holder whose generation moved on (a paused old holder) writes nothing.
/// The holder's side is `CampaignLease`.
struct FencedLeaseSQL: Sendable {
    /// The leased table.
    let table: String
    /// Its key column (`$1` in `held`).
    let key: String

    /// Campaign rows, keyed by request id.
    static let campaigns = FencedLeaseSQL(table: "campaigns", key: "request_id")
    /// Maintenance jobs, keyed by the job's name (`TokenHygieneStore.job`).
    static let jobs = FencedLeaseSQL(table: "job_leases", key: "job")

    /// `WHERE` condition of every holder write: `$1` the row's key, `$2` the owner, `$3` the
    /// generation (`parameters(_:)`), and the lease not yet expired by the database's clock.
    var held: String { "\(key) = $1 AND lease_owner = $2 AND lease_generation = $3 AND lease_expires_at > now()" }

    /// Condition of a take: the lease is free, or expired by the database's clock.
    static let available = "(lease_expires_at IS NULL OR lease_expires_at <= now())"

    /// `SET` items of a take: the next generation, the owner and the expiry.
    /// - Parameters:
    ///   - owner: the parameter holding the owner (`$1`).
    ///   - milliseconds: the parameter holding the lease's length in ms.
    ///   - alias: the table's alias in the statement, if any.
    static func take(owner: String, milliseconds: String, alias: String? = nil) -> String {
        let generation = alias.map { "\($0).lease_generation" } ?? "lease_generation"
        return "lease_owner = \(owner), lease_generation = \(generation) + 1, lease_expires_at = \(extend(milliseconds))"
    }

    /// The expiry `milliseconds` (a parameter) from the database's now.
    static func extend(_ milliseconds: String) -> String { "now() + \(milliseconds) * interval '1 millisecond'" }

    /// `SET` items that free the lease.
    static let free = "lease_owner = NULL, lease_expires_at = NULL"

    /// `$1`, `$2`, `$3` of `held` for `lease`.
    static func parameters(_ lease: CampaignLease) -> [PostgresValue?] {
        [.string(lease.requestID), .string(lease.owner), .int64(lease.generation)]
    }
}
