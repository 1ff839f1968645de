"""The call's quota: the circuit-breaker check sent to the quota Lambda (`client`), joined where
the quota step runs (`flow`), and the per-call price and daily budget (`budget`)."""
