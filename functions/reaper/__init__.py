"""The session reaper Lambda: every 5 minutes, stop leaked sessions, free their
capacity, keep warm pools filled, and run the other sweeps plugged into `hooks`."""
