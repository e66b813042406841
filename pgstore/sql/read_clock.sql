-- dbClock: one sample of the database's clock.
SELECT clock_timestamp()
