"""Sessions as a managed resource: the live-session ledger with its capacity caps,
the warm pool and the reaper's sweep. Shared by dispatch (reserve/claim/release around a session),
the reaper Lambda (sweep, refill) and sandboxctl (list, stop, warm).
"""
