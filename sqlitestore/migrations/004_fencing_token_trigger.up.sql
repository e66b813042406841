-- Reserve takes a new record's fencing token in its INSERT (the counter's
-- value + 1, read in the same statement under the write lock) and this
-- trigger advances the counter to it, so that a reservation needs no
-- statement of its own for the counter. The counter only moves up, so a
-- token is still never reused.
CREATE TRIGGER idem_attempts_fencing_token AFTER INSERT ON idem_attempts
BEGIN
	UPDATE idem_counters SET value = NEW.fencing_token
	WHERE name = 'fencing_token' AND value < NEW.fencing_token;
END;
