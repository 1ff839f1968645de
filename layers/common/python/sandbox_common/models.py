"""Request models of every entry point (§4, §5.3, §11). Strict: unknown fields and wrong types
are rejected; ids must match REQUEST_ID_RE; code is non-empty and at most 256 KiB of UTF-8.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    StringConstraints,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from . import dimensions
from .errors import SandboxInvalidRequest
from .files import GetFileRequest, InputFiles
from .limits import MAX_CODE_BYTES, MAX_JOB_TIMEOUT_SECONDS
from .naming import AGENT_ACTIONS, REQUEST_ID_RE, TOOL_NAME_RE, Action
from .redaction.catalogue import redact
from .tool_spec import MAX_CLIENT_TOOLS

Id = Annotated[str, StringConstraints(pattern=REQUEST_ID_RE.pattern)]
InvocationSource = Literal["chat", "scheduled", "composition"]
# The turn token (§16.5) is checked by sandbox_common.turn_token, not here, so a malformed token is
# counted as a token rejection; the model only bounds its size.
TurnToken = Annotated[str, StringConstraints(max_length=256)]
ToolName = Annotated[str, StringConstraints(pattern=TOOL_NAME_RE.pattern)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class BeginTurnRequest(_Strict):
    action: Literal[Action.BEGIN_TURN]
    tenant_id: Id
    agent_id: Id
    template_id: Id
    turn_id: Id
    user_id: Id | None = None
    turn_token: TurnToken | None = None
    # §21: the template tools the caller can answer (absent: all of them); only those are listed
    # in the tool descriptions begin_turn answers (sandbox_common.tool_spec.answerable).
    client_tools: Annotated[list[ToolName], Field(max_length=MAX_CLIENT_TOOLS)] | None = None


class ExecuteCodeRequest(_Strict):
    action: Literal[Action.EXECUTE_CODE]
    tenant_id: Id
    agent_id: Id
    template_id: Id
    turn_id: Id
    call_id: Id
    code: str
    user_id: Id | None = None
    invocation_source: InvocationSource | None = None
    files: InputFiles | None = None  # §14.1, rules in sandbox_common.files
    turn_token: TurnToken | None = None
    # §17: `background: true` answers at once with a job_id; `timeout_s` (default
    # limits.DEFAULT_JOB_TIMEOUT_SECONDS, at most 3600) only together with it.
    background: bool = False
    timeout_s: Annotated[int, Field(ge=1, le=MAX_JOB_TIMEOUT_SECONDS)] | None = None
    # §20: with "bash", `code` is a shell script run in the turn's session (run_command's action).
    language: Literal["python", "bash"] = "python"

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


class EndTurnRequest(_Strict):
    action: Literal[Action.END_TURN]
    tenant_id: Id
    turn_id: Id
    turn_token: TurnToken | None = None


class GetJobRequest(_Strict):
    """A job's state (`running` + elapsed_ms) or its final result."""

    action: Literal[Action.GET_JOB]
    tenant_id: Id
    agent_id: Id
    turn_id: Id
    job_id: Id
    turn_token: TurnToken | None = None


class CancelJobRequest(_Strict):
    action: Literal[Action.CANCEL_JOB]
    tenant_id: Id
    agent_id: Id
    turn_id: Id
    job_id: Id
    turn_token: TurnToken | None = None


# --- programmatic tool calling (SPEC §15) --------------------------------------------------------
CONTINUATION_PATTERN = r"^[A-Za-z0-9_-]{43}$"  # 32 random bytes, URL-safe base64 without padding
MAX_TOOL_ERROR_CHARS = 64 * 1024


class ResumeRequest(_Strict):
    """`resume`: answer a paused call's tool_call with `tool_result` (any JSON value, null
    included) or `tool_error` (the tool's message) — exactly one of them."""

    action: Literal[Action.RESUME]
    tenant_id: Id
    agent_id: Id
    turn_id: Id
    continuation: Annotated[str, StringConstraints(pattern=CONTINUATION_PATTERN)]
    tool_result: JsonValue = None
    tool_error: Annotated[str, StringConstraints(max_length=MAX_TOOL_ERROR_CHARS)] | None = None
    turn_token: TurnToken | None = None  # §16.5, validated with the turn like every other action

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


class SweepPausedCallsRequest(_Strict):
    """Internal, sent by the reaper's paused-calls hook: end the paused tool calls past
    their wait bound. Any caller may send it: it ends only what §15 has already ended (the bound
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
    model.model_fields["action"].annotation.__args__[0]: model  # type: ignore[union-attr]
    for model in AnyDispatchRequest.__args__  # type: ignore[attr-defined]
}
DISPATCH_ACTIONS: tuple[str, ...] = tuple(AGENT_ACTIONS)


class QuotaRequest(_Strict):
    tenant_id: Id
    agent_id: Id
    # §5.3's counts cost one more read after the counter transaction. Dispatch asks for them only
    # when a daily budget needs the count (nothing the agent does not need waits on its
    # critical path); an admission without them answers both counts as null.
    counts: bool = True
    # The call's idempotency identity. With it the count is written once per
    # call_id (a "counted" marker in the same transaction): a retry or a racing duplicate of the
    # same call is answered `already_counted` and counts nothing.
    call_id: Id | None = None
    # With it the count is turn-guarded: a ConditionCheck on the turn in the same transaction,
    # so a missing/ended/foreign turn or a wrong token counts nothing (`QuotaTurnRefused`).
    turn: QuotaTurnGuard | None = None
    # Undo this call_id's count (dispatch counted speculatively, then refused before running).
    release: bool = False


class QuotaTurnGuard(_Strict):
    turn_id: Id
    # SHA-256 hex of the request's turn token (sandbox_common.turn_token.token_hash), or "" for
    # a token-less call on a stage that does not require one: the turn's stored hash must equal it
    # ("" also matches a turn item without the attribute, as turn_token.verify does).
    token_sha256: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{64})?$")]


QuotaRequest.model_rebuild()


# A location part echoed as is: short lowercase identifiers (every field name we declare). No
# catalogue token fits this shape (each needs an upper-case letter, a digit run, `-` or `.`, or
# is longer than 32 chars), so an unknown field named after a secret is never echoed.
_ECHOABLE_LOC = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def _loc_part(part: object) -> str:
    if isinstance(part, int):
        return str(part)
    text = str(part)
    return text if _ECHOABLE_LOC.match(text) else "<field>"


def describe_validation_error(exc: ValidationError, prefix: str | None = None) -> str:
    """A sentence an agent can relay: field locations and reasons, never the offending input.

    Locations come from the input for unknown fields (their names): only identifier-shaped
    names are echoed, any other is `<field>`; the whole sentence is redacted as well. `prefix`:
    the action whose model was validated, put before every location (`execute_code.code`).
    """
    parts = []
    for err in exc.errors(include_input=False, include_url=False)[:5]:
        loc = (
            ".".join([*([prefix] if prefix else []), *(_loc_part(p) for p in err.get("loc", ()))])
            or "request"
        )
        parts.append(f"{loc}: {redact(str(err.get('msg', 'invalid')))}")
    more = len(exc.errors()) - len(parts)
    suffix = f" (+{more} more)" if more > 0 else ""
    return "Invalid request: " + "; ".join(parts) + suffix


def _load(event: Any) -> Any:
    if isinstance(event, (str, bytes, bytearray)):
        try:
            return json.loads(event)
        except (ValueError, UnicodeDecodeError):
            raise SandboxInvalidRequest("Invalid request: the event is not valid JSON.") from None
    return event


def parse_dispatch_event(event: Any) -> AnyDispatchRequest:
    """The event as its action's request model (REQUEST_MODELS), validated once."""
    return _parse_as(event, REQUEST_MODELS)


def _parse_as(event: Any, models: dict[Action, type[AnyDispatchRequest]]) -> AnyDispatchRequest:
    event = _load(event)
    if not isinstance(event, dict):
        raise SandboxInvalidRequest("Invalid request: the event must be a JSON object.")
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


def parse_quota_event(event: Any) -> QuotaRequest:
    event = _load(event)
    if not isinstance(event, dict):
        raise SandboxInvalidRequest("Invalid request: the event must be a JSON object.")
    try:
        return QuotaRequest.model_validate(event)
    except ValidationError as exc:
        raise SandboxInvalidRequest(describe_validation_error(exc)) from None


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
    runner_role_arn: str | None = None
    data_read: tuple[str, ...] = ()  # the tenant's data.read S3 prefixes (§14.4): s3_uri inputs


# --- the quota contract: dispatch -> sandbox-quota-check, one pair of models --------------------
# `QuotaRequest` above is the request; these are the answers (§5.3). The quota Lambda renders them
# with `model_dump()`, dispatch parses them with `parse_quota_response` (anything else -> the
# breaker fails closed). The per-dimension fields come from the dimensions registry
# (`{name}_count` when admitted, `{name}_cap` when refused, one per calls dimension): a field
# that names no calls dimension is off-contract.
class _PerDimension(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    __pydantic_extra__: dict[str, int | None] = Field(init=False)  # type: ignore[assignment]
    _FIELD: ClassVar[str]  # "count_field" | "cap_field": the Dimension property naming the field

    @model_validator(mode="after")
    def _fields_of_calls_dimensions(self) -> Self:
        allowed = {getattr(d, self._FIELD) for d in dimensions.calls()}
        unknown = sorted(set(self.model_extra or {}) - allowed)
        if unknown:
            raise ValueError(f"fields of no calls dimension: {', '.join(unknown)}")
        return self

    def _of(self, dimension: str) -> int | None:
        found = dimensions.get(dimension)
        return None if found is None else (self.model_extra or {}).get(getattr(found, self._FIELD))


class QuotaAdmitted(_PerDimension):
    _FIELD = "count_field"
    ok: Literal[True] = True
    already_counted: bool = False  # this call_id was counted before: proceed, nothing counted now
    retries: int = Field(default=0, ge=0)  # transaction conflicts retried (§16.6, shown to the agent)
    released: bool = False  # answer to `release`: True when a count was undone

    @classmethod
    def of(cls, counts: dict[str, int | None], **flags: Any) -> QuotaAdmitted:
        return cls.model_validate(
            {**{d.count_field: counts.get(d.name) for d in dimensions.calls()}, **flags}
        )

    def count(self, dimension: str) -> int | None:
        """This call's count in `dimension`'s window, when read back."""
        return self._of(dimension)


class QuotaTurnRefused(_Strict):
    """The turn guard failed: nothing counted. `turn_exists` False = no such turn yet (a first
    call: dispatch falls back to the sequential check after creating it)."""

    ok: Literal[False] = False
    turn_refused: Literal[True] = True
    turn_exists: bool


class QuotaRefused(_PerDimension):
    _FIELD = "cap_field"
    ok: Literal[False] = False
    dimension: str  # a dimension's name (`sandbox_common.dimensions`) or `unknown`
    resets_at: Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")]

    @field_validator("dimension")
    @classmethod
    def _a_dimension(cls, name: str) -> str:
        if name != dimensions.UNKNOWN and dimensions.get(name) is None:
            raise ValueError("not a cap dimension")
        return name

    @classmethod
    def of(cls, dimension: str, resets_at: str, caps: dict[str, int | None]) -> QuotaRefused:
        fields = {d.cap_field: caps.get(d.name) for d in dimensions.calls()}
        return cls.model_validate({"dimension": dimension, "resets_at": resets_at, **fields})

    def cap(self, dimension: str) -> int | None:
        return self._of(dimension)


def _quota_kind(value: Any) -> str:
    if isinstance(value, dict):
        if value.get("ok") is True:
            return "admitted"
        return "turn" if "turn_refused" in value else "refused"
    return (
        "turn"
        if isinstance(value, QuotaTurnRefused)
        else "admitted"
        if isinstance(value, QuotaAdmitted)
        else "refused"
    )


QuotaResponse = Annotated[
    Annotated[QuotaAdmitted, Tag("admitted")]
    | Annotated[QuotaRefused, Tag("refused")]
    | Annotated[QuotaTurnRefused, Tag("turn")],
    Discriminator(_quota_kind),
]
_QUOTA_RESPONSE: TypeAdapter[QuotaAdmitted | QuotaRefused | QuotaTurnRefused] = TypeAdapter(QuotaResponse)


def parse_quota_response(payload: bytes | str) -> QuotaAdmitted | QuotaRefused | QuotaTurnRefused:
    """The quota Lambda's answer; raises pydantic.ValidationError for anything off-contract."""
    return _QUOTA_RESPONSE.validate_json(payload)


# --- background jobs (§17): execute_code carries `background` / `timeout_s` itself ---------------
JOB_ACTIONS: tuple[Action, ...] = (Action.EXECUTE_CODE, Action.GET_JOB, Action.CANCEL_JOB)


def parse_job_event(event: Any) -> ExecuteCodeRequest | GetJobRequest | CancelJobRequest:
    """The job-aware parse of execute_code / get_job / cancel_job (same errors as the main parser)."""
    event = _load(event)
    if not isinstance(event, dict) or event.get("action") not in JOB_ACTIONS:
        *first, last = JOB_ACTIONS
        raise SandboxInvalidRequest(f"Invalid request: expected {', '.join(first)} or {last}.")
    return _parse_as(event, {a: REQUEST_MODELS[a] for a in JOB_ACTIONS})  # type: ignore[return-value]


# --- programmatic tool calling (§15): ResumeRequest is defined above ------------------------------
def parse_resume_event(event: Any) -> ResumeRequest:
    event = _load(event)
    if not isinstance(event, dict):
        raise SandboxInvalidRequest("Invalid request: the event must be a JSON object.")
    try:
        return ResumeRequest.model_validate(event)
    except ValidationError as exc:
        raise SandboxInvalidRequest(describe_validation_error(exc)) from None
