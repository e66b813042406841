-- An approval asked for by a configured rule (SPEC §8.1) names the rule and
-- the role that may decide it (issue 35). Approvals made before carry
-- neither: rule '' (none), approver_role '' (the approver role).
ALTER TABLE idem_approvals
    ADD COLUMN rule text NOT NULL DEFAULT '',
    ADD COLUMN approver_role text NOT NULL DEFAULT '';
