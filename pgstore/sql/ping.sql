-- Store.Ping: one round trip.
SELECT 1
