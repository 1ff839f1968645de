"""The `backstop` Lambda: CloudWatch Logs subscription-filter redaction backstop."""
