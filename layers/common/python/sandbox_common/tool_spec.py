"""The tools the model sees, built here and nowhere else.

`begin_turn` answers them (`"tools": [...]`, and `"tool"` = the execute_code definition for Part I
callers); the MCP server, the Strands tools and the agent client serve exactly what begin_turn
returned, never a definition of their own. Four tools:

- `execute_code` (`code`, optional `language`, `files`, `background`, `timeout_s`): Python in the
  turn's session, or with `language` a JavaScript or TypeScript program run by Node.js there;
- `run_command` (`command`, same options): a bash script, the same dispatch action with
  `"language": "bash"` and `code` = the command;
- `get_job` / `cancel_job` (`job_id`): a background job of the turn.

Every sentence the model reads about them is stated once below. The descriptions carry the
stage's per-call deadline and output caps (`SurfaceLimits`, from dispatch's settings) and the
template's tools callable from code — only those the calling client can answer
(`callable_tools`). Stdlib-only imports: the agent client's tests import it without pydantic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .limits import (
    DEFAULT_JOB_TIMEOUT_SECONDS,
    MAX_CODE_BYTES,
    MAX_INLINE_INPUT_BYTES,
    MAX_INPUT_FILES,
    MAX_INPUT_PATH_BYTES,
    MAX_JOB_TIMEOUT_SECONDS,
    TOOLS_MAX_CALLS,
    TOOLS_MAX_PER_TEMPLATE,
)
from .naming import REQUEST_ID_RE, TOOL_NAME_RE, Action

EXECUTE_CODE = str(Action.EXECUTE_CODE)
RUN_COMMAND = "run_command"
GET_JOB = str(Action.GET_JOB)
CANCEL_JOB = str(Action.CANCEL_JOB)
TOOL_NAMES = (EXECUTE_CODE, RUN_COMMAND, GET_JOB, CANCEL_JOB)  # the order begin_turn lists them in
TOOL_NAME = EXECUTE_CODE  # the one tool of Part I (`"tool"` in begin_turn's answer)
# run_command is execute_code with this language and the command as `code`;
# execute_code's own language is the default.
COMMAND_LANGUAGE = "bash"
CODE_LANGUAGE = "python"
# execute_code's other languages, as AgentCore's executeCode offers them: a Node.js program.
NODE_LANGUAGES = ("javascript", "typescript")
CODE_LANGUAGES = (CODE_LANGUAGE, *NODE_LANGUAGES)  # execute_code's `language` values
LANGUAGES = (*CODE_LANGUAGES, COMMAND_LANGUAGE)  # every `language` dispatch takes
# begin_turn's optional `client_tools`: at most this many names (a client may have more tools
# than a template allows; only the intersection is listed).
MAX_CLIENT_TOOLS = 128


class LimitSettings(Protocol):
    """What the descriptions need of a stage's settings (dispatch's DispatchSettings has them)."""

    call_timeout_seconds: int
    stdout_cap_bytes: int
    stderr_cap_bytes: int


@dataclass(frozen=True)
class SurfaceLimits:
    """The figures the descriptions state: the per-call deadline and the output caps."""

    call_timeout_seconds: int = 120
    stdout_cap_bytes: int = 262_144
    stderr_cap_bytes: int = 32_768

    @classmethod
    def of(cls, settings: LimitSettings) -> SurfaceLimits:
        return cls(settings.call_timeout_seconds, settings.stdout_cap_bytes, settings.stderr_cap_bytes)


# --- what the model reads: each sentence once ---------------------------------------------------
EXECUTE_CODE_LEAD = (
    "Run Python (or, with language, JavaScript or TypeScript) in this conversation's isolated sandbox and "
    "get back stdout, stderr and an exit status. Variables, imports and files persist between Python calls "
    "of this conversation. A trailing expression is shown like a notebook cell."
)
RUN_COMMAND_LEAD = (
    "Run a bash script in this conversation's isolated sandbox and get back stdout, stderr and its exit "
    "code, in the same session and working directory as execute_code (files one writes, the other sees). "
    "The session's own python, python3 and pip come first on PATH."
)
DEADLINE = (
    "Each call must finish within {seconds} s or it is stopped; for longer work set background: true "
    "(a job of up to {max_job} s) and check on it with get_job."
)
# Why the first sentence of execute_code and DEADLINE do not contradict each other: a job is a new process.
JOB_PROCESS = (
    "A background job runs as a fresh process in this session: it shares the working directory and files, "
    "not the variables or imports of earlier calls."
)
OUTPUT_CAPS = "Output is truncated (stdout {stdout}, stderr {stderr}) and secrets are redacted."
FILES_BACK = (
    "Files written under outputs/ and matplotlib figures still open at the end of the call come back as "
    "files (figures as PNG)."
)
CALLABLE_TOOLS = (
    "The code can call these tools of yours directly: `from sandbox_tools import tools` then "
    "`tools.NAME(**kwargs)` (keyword arguments only, JSON values) returns the tool's JSON result or raises "
    "`sandbox_tools.ToolError`; at most {max_calls} tool calls per execution. Loop over a tool in one "
    "execution and print only a summary, instead of calling it once per message. Tools: {names}."
)
GET_JOB_LEAD = (
    "Check a background job of this conversation (started with background: true): answers status "
    "running with elapsed_ms, or the job's final result with status completed, failed, timed_out or "
    "cancelled."
)
CANCEL_JOB_LEAD = "Stop a running background job of this conversation; answers its final result."
CODE_FIELD = "Source to execute, in `language` (at most {max_bytes} bytes)."
LANGUAGE_FIELD = (
    "python (the default), javascript (run by Node.js as CommonJS) or typescript (run by Node.js as an ES "
    "module; types are removed, not checked). A JavaScript or TypeScript program runs as a fresh Node.js "
    "process in this session: it shares the working directory and files, not variables."
)
COMMAND_FIELD = "The bash script to run (at most {max_bytes} bytes)."
FILES_FIELD = (
    "Files written into the working directory before the call runs (at most {max_files}): each "
    "{{path, content_base64}} (at most {inline} in total) or {{path, s3_uri}} (under this workspace's "
    "data prefixes)."
)
PATH_FIELD = "Path relative to the working directory (no leading /, no '..')."
CONTENT_FIELD = "The file's bytes, base64-encoded."
S3_URI_FIELD = "s3://bucket/key of an object under this workspace's data prefixes."
BACKGROUND_FIELD = "Run as a background job: answers at once with a job_id to check with get_job."
TIMEOUT_FIELD = (
    "Background jobs only: seconds after which the job is stopped (default {default}, at most {max})."
)
JOB_ID_FIELD = "The job_id the background call answered."


def _size(n_bytes: int) -> str:
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if n_bytes % size == 0:
            return f"{n_bytes // size} {unit}"
    return f"{n_bytes} bytes"


def _files_schema() -> dict[str, Any]:
    path = {"type": "string", "minLength": 1, "maxLength": MAX_INPUT_PATH_BYTES, "description": PATH_FIELD}
    return {
        "type": "array",
        "maxItems": MAX_INPUT_FILES,
        "description": FILES_FIELD.format(max_files=MAX_INPUT_FILES, inline=_size(MAX_INLINE_INPUT_BYTES)),
        "items": {
            "type": "object",
            "properties": {
                "path": path,
                "content_base64": {"type": "string", "description": CONTENT_FIELD},
                "s3_uri": {"type": "string", "pattern": "^s3://", "description": S3_URI_FIELD},
            },
            # path and exactly one of the two sources (no other property is allowed)
            "required": ["path"],
            "minProperties": 2,
            "maxProperties": 2,
            "additionalProperties": False,
        },
    }


def _run_schema(
    field: str, field_description: str, *, language: dict[str, Any] | None = None
) -> dict[str, Any]:
    """execute_code's and run_command's input: the source field, its `language` when it has a
    choice of them, files, background, timeout_s."""
    return {
        "type": "object",
        "properties": {
            field: {"type": "string", "minLength": 1, "description": field_description},
            **({"language": language} if language is not None else {}),
            "files": _files_schema(),
            "background": {"type": "boolean", "description": BACKGROUND_FIELD},
            "timeout_s": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_JOB_TIMEOUT_SECONDS,
                "description": TIMEOUT_FIELD.format(
                    default=DEFAULT_JOB_TIMEOUT_SECONDS, max=MAX_JOB_TIMEOUT_SECONDS
                ),
            },
        },
        "required": [field],
        "additionalProperties": False,
    }


def _job_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "job_id": {"type": "string", "pattern": REQUEST_ID_RE.pattern, "description": JOB_ID_FIELD}
        },
        "required": ["job_id"],
        "additionalProperties": False,
    }


def _run_tail(limits: SurfaceLimits) -> str:
    """The sentences execute_code and run_command share: deadline, what a job is, output caps, files back."""
    return " ".join(
        (
            DEADLINE.format(seconds=limits.call_timeout_seconds, max_job=MAX_JOB_TIMEOUT_SECONDS),
            JOB_PROCESS,
            OUTPUT_CAPS.format(stdout=_size(limits.stdout_cap_bytes), stderr=_size(limits.stderr_cap_bytes)),
            FILES_BACK,
        )
    )


def tool_definition(tools: Sequence[str] = (), *, limits: SurfaceLimits = SurfaceLimits()) -> dict[str, Any]:
    """The execute_code tool; `tools` are the template's tools callable from code that the caller
    can answer (listed in its description)."""
    description = f"{EXECUTE_CODE_LEAD} {_run_tail(limits)}"
    if tools:
        description += " " + CALLABLE_TOOLS.format(max_calls=TOOLS_MAX_CALLS, names=", ".join(sorted(tools)))
    language = {"type": "string", "enum": list(CODE_LANGUAGES), "default": CODE_LANGUAGE}
    schema = _run_schema(
        "code",
        CODE_FIELD.format(max_bytes=MAX_CODE_BYTES),
        language=language | {"description": LANGUAGE_FIELD},
    )
    return {"name": EXECUTE_CODE, "description": description, "input_schema": schema}


def tool_definitions(
    tools: Sequence[str] = (), *, limits: SurfaceLimits = SurfaceLimits()
) -> list[dict[str, Any]]:
    """Every tool of the surface, in TOOL_NAMES order (execute_code first)."""
    return [
        tool_definition(tools, limits=limits),
        {
            "name": RUN_COMMAND,
            "description": f"{RUN_COMMAND_LEAD} {_run_tail(limits)}",
            "input_schema": _run_schema("command", COMMAND_FIELD.format(max_bytes=MAX_CODE_BYTES)),
        },
        {"name": GET_JOB, "description": GET_JOB_LEAD, "input_schema": _job_schema()},
        {"name": CANCEL_JOB, "description": CANCEL_JOB_LEAD, "input_schema": _job_schema()},
    ]


def answerable(template_tools: Iterable[str], client_tools: Iterable[str] | None) -> tuple[str, ...]:
    """The template's tools a caller can answer: all of them when it named none (`None`, a caller
    of before `client_tools`), else those it named."""
    allowed = sorted(set(template_tools))
    if client_tools is None:
        return tuple(allowed)
    named = set(client_tools)
    return tuple(t for t in allowed if t in named)


def begin_turn_tools(
    template_tools: Iterable[str], client_tools: Iterable[str] | None, settings: LimitSettings
) -> dict[str, Any]:
    """begin_turn's tool fields: `tools`, every definition, and `tool`, execute_code's."""
    definitions = tool_definitions(
        answerable(template_tools, client_tools), limits=SurfaceLimits.of(settings)
    )
    return {"tool": definitions[0], "tools": definitions}


def validate_tool_names(names: Iterable[str]) -> tuple[str, ...]:
    """A template's tool allowlist, sorted and de-duplicated; ValueError names what is wrong."""
    unique = sorted({str(name).strip() for name in names if str(name).strip()})
    bad = [name for name in unique if not TOOL_NAME_RE.match(name)]
    if bad:
        raise ValueError(f"invalid tool name(s) {', '.join(map(repr, bad))}: expected {TOOL_NAME_RE.pattern}")
    if len(unique) > TOOLS_MAX_PER_TEMPLATE:
        raise ValueError(f"{len(unique)} tools, at most {TOOLS_MAX_PER_TEMPLATE} per template")
    return tuple(unique)
