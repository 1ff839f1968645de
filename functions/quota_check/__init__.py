"""sandbox-quota-check: the atomic two-dimension circuit breaker (SPEC §5).

handler.py (thin) -> logic.py (decision) -> caps.py (SSM caps) / counters.py (DynamoDB).
"""
