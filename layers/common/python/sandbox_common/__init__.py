"""Code shared by every Lambda of the sandbox (shipped as the `common` layer at /opt/python).

Modules here hold the one source of truth for names (naming), env settings (settings), the
agent-facing error classes (errors), request/response models (models), the UTC window clock
(windows) and the token-shape catalogue with its redactors (redaction). Nothing here has
import-time side effects: boto3 clients are created lazily (aws.client).
"""
