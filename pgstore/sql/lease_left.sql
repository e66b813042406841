-- LeaseLeft: the lease expiry of a record in flight under its fence. $1
-- org, $2 principal, $3 key, $4 fencing token.
SELECT lease_expires_at
FROM idem_records
WHERE org = $1 AND principal = $2 AND key = $3 AND held AND fencing_token = $4 AND state = 'in_flight'
