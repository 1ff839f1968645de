"""The call's pre-flight: may the tenant's template run now, where, and how. Read ahead of the call
(`ahead`), beside its idempotency claim; judged by its stage (`stage`)."""
