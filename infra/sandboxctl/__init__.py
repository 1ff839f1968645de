"""`sandboxctl`: the operator CLI. Entry point: infra.sandboxctl.main:main."""
