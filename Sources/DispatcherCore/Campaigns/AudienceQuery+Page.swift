import DispatcherStatus
import Postgres

extension AudienceQuery {
    /// The statement reading the next page: active tokens of the audience whose token sorts after
    /// `cursor` (nil: from the start), in token order, at most `limit` rows. Served by the partial
    /// index `device_tokens_campaign_audience (bundle_id, token_kind, device_token) WHERE status = 'active'`.
    /// Columns: those of `TokenStore.storedToken`.
    public func page(after cursor: String?, limit: Int) -> (sql: String, parameters: [PostgresValue?]) {
        var (conditions, parameters) = conditions(after: cursor)
        parameters.append(.int(limit))
        let sql = "SELECT \(TokenStore.columns) FROM device_tokens WHERE \(conditions.joined(separator: " AND ")) ORDER BY device_token LIMIT $\(parameters.count)"
        return (sql, parameters)
    }
}
