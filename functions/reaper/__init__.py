"""The session reaper Lambda (SPEC §16.3): every 5 minutes, stop leaked sessions, free their
capacity, keep warm pools filled, and run the other sweeps plugged into `hooks`."""
