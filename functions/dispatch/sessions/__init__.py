"""A turn's one session from the stage's managed sessions: warm claim or capped cold start
(`source`), the turn's session lease and its bookkeeping (`flow`), the activation writes sent
beside the user code (`activation`)."""
