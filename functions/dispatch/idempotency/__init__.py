"""Once per call_id: the call's idempotency claim and completion (`store`), and the outermost stage
of a call, which holds the claim around the call and writes its one audit row (`stage`)."""
