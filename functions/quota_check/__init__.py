"""sandbox-quota-check: the atomic two-dimension circuit breaker.

handler.py (thin) -> logic.py (decision) -> caps.py (SSM caps) / counters.py (DynamoDB).
"""
