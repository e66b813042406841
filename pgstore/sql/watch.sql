-- Watch: marks the in-flight record of a key so that its completion, on
-- whichever instance, signals idem_completed. $1 org, $2 principal, $3
-- key.
UPDATE idem_records SET watched = true
WHERE org = $1 AND principal = $2 AND key = $3 AND held AND state = 'in_flight' AND NOT watched
