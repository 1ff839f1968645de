"""`sandboxctl`: the operator CLI (SPEC §10). Entry point: infra.sandboxctl.main:main."""
