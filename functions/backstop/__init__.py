"""The `backstop` Lambda: CloudWatch Logs subscription-filter redaction backstop (SPEC §8.4)."""
