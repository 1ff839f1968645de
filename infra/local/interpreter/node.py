"""Node.js and TypeScript for the local interpreter's sessions (JavaScript and TypeScript calls).

Node.js is the one the project already needs for the CDK CLI, found as `npx cdk` finds it: the
first `node` on the server's PATH (its real path). TypeScript is the `typescript` package pinned
in package.json / package-lock.json beside the CDK CLI, in the repository's node_modules (`make
install`). Under bubblewrap both are bound read-only into each session: Node.js at its own path
(nothing to bind when it is installed under a system directory, which every session sees
read-only anyway), TypeScript at SANDBOX_TYPESCRIPT_DIR; the session's environment names them
(`SANDBOX_NODE`, `SANDBOX_TYPESCRIPT`), which the session runtime's Node.js runner
(`sandbox_session.node`) reads. Without Node.js a JavaScript call fails with Node's not-started
status (127) and says so on stderr; without the package a TypeScript call does.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sandbox_common import naming

REPO_ROOT = Path(__file__).resolve().parents[3]
TYPESCRIPT_DIR = REPO_ROOT / "node_modules" / "typescript"
SANDBOX_TYPESCRIPT_DIR = "/opt/local-interpreter/typescript"


@dataclass(frozen=True)
class NodeRuntime:
    node: str | None  # the real path of the Node.js binary, None when there is none
    typescript: str | None  # the real path of the typescript package, None when not installed

    @property
    def prefix(self) -> str | None:
        """The Node.js installation (`<prefix>/bin/node`), which a session needs read-only."""
        return os.path.dirname(os.path.dirname(self.node)) if self.node else None

    def env(self, *, sandboxed: bool) -> dict[str, str]:
        """What the session's environment says about them (the paths as the session sees them)."""
        env: dict[str, str] = {}
        if self.node:
            env[naming.ENV_SESSION_NODE] = self.node
        if self.typescript:
            env[naming.ENV_SESSION_TYPESCRIPT] = SANDBOX_TYPESCRIPT_DIR if sandboxed else self.typescript
        return env

    def binds(self, system_dirs: tuple[str, ...]) -> list[str]:
        """bwrap arguments binding them read-only (Node.js only when outside the system directories)."""
        args: list[str] = []
        prefix = self.prefix
        if prefix and not any(prefix == d or prefix.startswith(d + "/") for d in system_dirs):
            args += ["--ro-bind", prefix, prefix]
        if self.typescript:
            args += ["--ro-bind", self.typescript, SANDBOX_TYPESCRIPT_DIR]
        return args


def find() -> NodeRuntime:
    """Node.js on the server's PATH and the repository's pinned TypeScript, as they are now."""
    found = shutil.which("node")
    node = os.path.realpath(found) if found else None
    typescript = os.path.realpath(TYPESCRIPT_DIR) if (TYPESCRIPT_DIR / "package.json").is_file() else None
    return NodeRuntime(node=node, typescript=typescript)
