"""Test harnesses shared by several suites (the real local stack: tests/support/stack.py)."""
