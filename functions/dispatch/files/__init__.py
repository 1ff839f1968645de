"""Artifacts out: the collect stage (`stage`), the container's artifacts (`flow`), get_file
(`access`). Input files are written into the session by the session stage
(`dispatch.sessions.inputs`)."""
