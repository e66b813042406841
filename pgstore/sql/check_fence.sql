-- CheckFence: holds the record of a fence (FOR SHARE, until the effect's
-- transaction ends) if it is in flight under the fence's token with more
-- than a margin of its lease left by the database's clock. $1 org, $2
-- principal, $3 key, $4 fencing token, $5 margin in seconds.
SELECT 1
FROM idem_records
WHERE org = $1 AND principal = $2 AND key = $3 AND held AND fencing_token = $4 AND state = 'in_flight'
    AND lease_expires_at > clock_timestamp() + $5::float8 * interval '1 second'
FOR SHARE
