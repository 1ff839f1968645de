"""Programmatic tool calling: a call that pauses at a tool call and goes on with `resume`; the
continuations table (`store`)."""
