"""The project's name and the shapes of ids: config-time tenant ids, the ids of a request, Code
Interpreter names, turn tokens, tool names, tenant secrets' short names."""

from __future__ import annotations

import re

PROJECT = "thinkwork"

TENANT_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")  # config-time tenant ids
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")  # every id in a request
INTERPRETER_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,47}$")  # AgentCore's name rule
# Turn token (docs/sessions.md): 43–128 characters of URL-safe base64 without padding (≥ 32 random bytes).
TURN_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43,128}$")
# A tool name as agent frameworks spell them (Anthropic/Strands: letters, digits, _ and -).
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
# A tenant secret's short name (`crm-token`), as egress credential templates name it.
SECRET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
