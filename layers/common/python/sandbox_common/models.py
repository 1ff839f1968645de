"""Request models of every entry point. Strict: unknown fields and wrong types
are rejected; ids must match REQUEST_ID_RE; code is non-empty and at most 256 KiB of UTF-8.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import SandboxInvalidRequest
from .files import GetFileRequest, InputFiles
from .limits import MAX_CODE_BYTES, MAX_JOB_TIMEOUT_SECONDS
from .naming import AGENT_ACTIONS, TOOL_NAME_RE, Action
from .tool_spec import MAX_CLIENT_TOOLS
from .validation import Id, StrictModel, describe_validation_error, load_event, load_object, validate_event

InvocationSource = Literal["chat", "scheduled", "composition"]
# The turn token is checked by sandbox_common.turn_token, not here, so a malformed token is
# counted as a token rejection; the model only bounds its size.
TurnToken = Annotated[str, StringConstraints(max_length=256)]
ToolName = Annotated[str, StringConstraints(pattern=TOOL_NAME_RE.pattern)]


class BeginTurnRequest(StrictModel):
    action: Literal[Action.BEGIN_TURN]
    tenant_id: Id
    agent_id: Id
    template_id: Id
    turn_id: Id
    user_id: Id | None = None
    turn_token: TurnToken | None = None
    # the template tools the caller can answer (absent: all of them); only those are listed
    # in the tool descriptions begin_turn answers (sandbox_common.tool_spec.answerable).
    client_tools: Annotated[list[ToolName], Field(max_length=MAX_CLIENT_TOOLS)] | None = None


class ExecuteCodeRequest(StrictModel):
    action: Literal[Action.EXECUTE_CODE]
    tenant_id: Id
    agent_id: Id
    template_id: Id
    turn_id: Id
    call_id: Id
    code: str
    user_id: Id | None = None
    invocation_source: InvocationSource | None = None
    files: InputFiles | None = None  # rules in sandbox_common.files
    turn_token: TurnToken | None = None
    # `background: true` answers at once with a job_id; `timeout_s` (default
    # limits.DEFAULT_JOB_TIMEOUT_SECONDS, at most 3600) only together with it.
    background: bool = False
    timeout_s: Annotated[int, Field(ge=1, le=MAX_JOB_TIMEOUT_SECONDS)] | None = None
    # with "bash", `code` is a shell script run in the turn's session (run_command's action);
    # with "javascript" / "typescript", a Node.js program run there (tool_spec.LANGUAGES).
    language: Literal["python", "javascript", "typescript", "bash"] = "python"

    @model_validator(mode="after")
    def _timeout_only_for_jobs(self) -> ExecuteCodeRequest:
        if self.timeout_s is not None and not self.background:
            raise ValueError("timeout_s is only allowed with background: true")
        return self

    @field_validator("code")
    @classmethod
    def _code_is_runnable(cls, code: str) -> str:
        if not code.strip():
            raise ValueError("code is empty or whitespace only")
        if "\x00" in code:
            # Python refuses source with NUL bytes, and its traceback shows host paths.
            raise ValueError("code contains a NUL character")
        try:
            size = len(code.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError("code is not valid UTF-8 text") from None
        if size > MAX_CODE_BYTES:
            raise ValueError(f"code is {size} bytes, over the {MAX_CODE_BYTES}-byte limit")
        return code


class EndTurnRequest(StrictModel):
    action: Literal[Action.END_TURN]
    tenant_id: Id
    turn_id: Id
    turn_token: TurnToken | None = None


class GetJobRequest(StrictModel):
    """A job's state (`running` + elapsed_ms) or its final result."""

    action: Literal[Action.GET_JOB]
    tenant_id: Id
    agent_id: Id
    turn_id: Id
    job_id: Id
    turn_token: TurnToken | None = None


class CancelJobRequest(StrictModel):
    action: Literal[Action.CANCEL_JOB]
    tenant_id: Id
    agent_id: Id
    turn_id: Id
    job_id: Id
    turn_token: TurnToken | None = None


# --- programmatic tool calling --------------------------------------------------------
CONTINUATION_PATTERN = r"^[A-Za-z0-9_-]{43}$"  # 32 random bytes, URL-safe base64 without padding
MAX_TOOL_ERROR_CHARS = 64 * 1024


class ResumeRequest(StrictModel):
    """`resume`: answer a paused call's tool_call with `tool_result` (any JSON value, null
    included) or `tool_error` (the tool's message) — exactly one of them."""

    action: Literal[Action.RESUME]
    tenant_id: Id
    agent_id: Id
    turn_id: Id
    continuation: Annotated[str, StringConstraints(pattern=CONTINUATION_PATTERN)]
    tool_result: JsonValue = None
    tool_error: Annotated[str, StringConstraints(max_length=MAX_TOOL_ERROR_CHARS)] | None = None
    turn_token: TurnToken | None = None  # validated with the turn like every other action

    @model_validator(mode="after")
    def _exactly_one_answer(self) -> ResumeRequest:
        has_result = "tool_result" in self.model_fields_set
        has_error = "tool_error" in self.model_fields_set and self.tool_error is not None
        if has_result == has_error:
            raise ValueError("exactly one of tool_result and tool_error is required")
        return self

    @property
    def has_result(self) -> bool:
        return "tool_result" in self.model_fields_set


class SweepPausedCallsRequest(StrictModel):
    """Internal, sent by the reaper's paused-calls hook: end the paused tool calls past
    their wait bound. Any caller may send it: it ends only what the wait bound has already ended (the bound
    passed), and answers a count."""

    action: Literal[Action.SWEEP_PAUSED_CALLS]

    @property
    def tenant_id(self) -> None:
        return None


AnyDispatchRequest = (
    BeginTurnRequest
    | ExecuteCodeRequest
    | EndTurnRequest
    | GetFileRequest
    | GetJobRequest
    | CancelJobRequest
    | ResumeRequest
    | SweepPausedCallsRequest
)
# The request model of each action (each model's `action` field names its own).
REQUEST_MODELS: dict[Action, type[AnyDispatchRequest]] = {
    model.model_fields["action"].annotation.__args__[0]: model  # type: ignore[union-attr,unused-ignore]
    for model in AnyDispatchRequest.__args__  # type: ignore[attr-defined,unused-ignore]
}
DISPATCH_ACTIONS: tuple[str, ...] = tuple(AGENT_ACTIONS)


def parse_dispatch_event(event: Any) -> AnyDispatchRequest:
    """The event as its action's request model (REQUEST_MODELS), validated once."""
    return _parse_as(event, REQUEST_MODELS)


def _parse_as(event: Any, models: dict[Action, type[AnyDispatchRequest]]) -> AnyDispatchRequest:
    event = load_object(event)
    raw = event.get("action")
    try:
        action = Action(raw if isinstance(raw, str) else "")
        model = models[action]
    except (ValueError, KeyError):
        expected = [str(a) for a in models if a in AGENT_ACTIONS]
        raise SandboxInvalidRequest(
            "Invalid request: unknown or missing action; expected one of " + ", ".join(expected) + "."
        ) from None
    try:
        return model.model_validate(event)
    except ValidationError as exc:
        raise SandboxInvalidRequest(describe_validation_error(exc, prefix=action)) from None


class TenantSubstrate(BaseModel):
    """What a tenant's shard stack publishes (JSON in SSM at naming.tenant_substrate_parameter):
    the config defaults for the tenant plus the ids dispatch needs. Operators' run-time changes
    (tenant policy, templates) live in the TENANTS table and win over these defaults.
    An environment missing from `interpreters` means "not published yet" -> provisioning.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    tenant_id: str
    compliance_tier: Literal["standard", "regulated", "hipaa"] = "standard"
    environments: tuple[str, ...] = ()
    templates: dict[str, str | None] = {}
    interpreters: dict[str, str] = {}  # environment -> code interpreter id
    interpreter_arns: dict[str, str] = {}  # environment -> its ARN (the runner's session policy)
    runner_role_arn: str | None = None
    data_read: tuple[str, ...] = ()  # the tenant's data.read S3 prefixes: s3_uri inputs


# --- background jobs: execute_code carries `background` / `timeout_s` itself ---------------
JOB_ACTIONS: tuple[Action, ...] = (Action.EXECUTE_CODE, Action.GET_JOB, Action.CANCEL_JOB)


def parse_job_event(event: Any) -> ExecuteCodeRequest | GetJobRequest | CancelJobRequest:
    """The job-aware parse of execute_code / get_job / cancel_job (same errors as the main parser)."""
    event = load_event(event)
    if not isinstance(event, dict) or event.get("action") not in JOB_ACTIONS:
        *first, last = JOB_ACTIONS
        raise SandboxInvalidRequest(f"Invalid request: expected {', '.join(first)} or {last}.")
    return _parse_as(event, {a: REQUEST_MODELS[a] for a in JOB_ACTIONS})  # type: ignore[return-value]


# --- programmatic tool calling: ResumeRequest is defined above ------------------------------
def parse_resume_event(event: Any) -> ResumeRequest:
    return validate_event(ResumeRequest, event)
