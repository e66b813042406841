-- Gives back an approval its execution consumed although nothing of it
-- ran (FinishParams.ReturnApproval, SPEC §8): approved and unconsumed
-- again, as before the reservation. Only an approval consumed by that
-- execution changes; past its expiry it then reads expired, as any.
--
-- $1 org, $2 approval id, $3 execution id.
UPDATE idem_approvals SET status = 'approved', consumed_at = NULL, execution_id = NULL
WHERE org = $1 AND id = $2 AND execution_id = $3 AND status = 'consumed'
