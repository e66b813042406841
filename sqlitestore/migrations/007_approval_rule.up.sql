-- An approval asked for by a configured rule (SPEC §8.1) names the rule and
-- the role that may decide it (issue 35). Approvals made before carry
-- neither: rule '' (none), approver_role '' (the approver role).
ALTER TABLE idem_approvals ADD COLUMN rule TEXT NOT NULL DEFAULT '';
ALTER TABLE idem_approvals ADD COLUMN approver_role TEXT NOT NULL DEFAULT '';
