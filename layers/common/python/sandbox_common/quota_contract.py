"""The quota contract: dispatch -> sandbox-quota-check, one request model and its answers,
apart from the dispatch request models so the quota Lambda's cold start builds only these."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    TypeAdapter,
    field_validator,
    model_validator,
)

from . import dimensions
from .validation import Id, StrictModel, validate_event


class QuotaRequest(StrictModel):
    tenant_id: Id
    agent_id: Id
    # The answer's counts cost one more read after the counter transaction. Dispatch asks for them only
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


class QuotaTurnGuard(StrictModel):
    turn_id: Id
    # SHA-256 hex of the request's turn token (sandbox_common.turn_token.token_hash), or "" for
    # a token-less call on a stage that does not require one: the turn's stored hash must equal it
    # ("" also matches a turn item without the attribute, as turn_token.verify does).
    token_sha256: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{64})?$")]


QuotaRequest.model_rebuild()


def parse_quota_event(event: Any) -> QuotaRequest:
    return validate_event(QuotaRequest, event)


# The answers. The quota Lambda renders them
# with `model_dump()`, dispatch parses them with `parse_quota_response` (anything else -> the
# breaker fails closed). The per-dimension fields come from the dimensions registry
# (`{name}_count` when admitted, `{name}_cap` when refused, one per calls dimension): a field
# that names no calls dimension is off-contract.
class _PerDimension(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    __pydantic_extra__: dict[str, int | None] = Field(init=False)  # type: ignore[assignment,unused-ignore]
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
    retries: int = Field(default=0, ge=0)  # transaction conflicts retried (shown to the agent)
    released: bool = False  # answer to `release`: True when a count was undone

    @classmethod
    def of(cls, counts: dict[str, int | None], **flags: Any) -> QuotaAdmitted:
        return cls.model_validate(
            {**{d.count_field: counts.get(d.name) for d in dimensions.calls()}, **flags}
        )

    def count(self, dimension: str) -> int | None:
        """This call's count in `dimension`'s window, when read back."""
        return self._of(dimension)


class QuotaTurnRefused(StrictModel):
    """The turn guard failed: nothing counted. `turn_exists` False = no such turn yet (a first
    call: dispatch falls back to the sequential check after creating it)."""

    ok: Literal[False] = False
    turn_refused: Literal[True] = True
    turn_exists: bool


class QuotaTenantRefused(StrictModel):
    """The tenant's policy item said it is disabled when the count's transaction read it:
    nothing counted (dispatch answers SandboxProvisioning, reason tenant_disabled)."""

    ok: Literal[False] = False
    tenant_disabled: Literal[True] = True


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
        if "tenant_disabled" in value:
            return "tenant"
        return "turn" if "turn_refused" in value else "refused"
    if isinstance(value, QuotaTenantRefused):
        return "tenant"
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
    | Annotated[QuotaTurnRefused, Tag("turn")]
    | Annotated[QuotaTenantRefused, Tag("tenant")],
    Discriminator(_quota_kind),
]
QuotaAnswer = QuotaAdmitted | QuotaRefused | QuotaTurnRefused | QuotaTenantRefused
_QUOTA_RESPONSE: TypeAdapter[QuotaAnswer] = TypeAdapter(QuotaResponse)


def parse_quota_response(payload: bytes | str) -> QuotaAnswer:
    """The quota Lambda's answer; raises pydantic.ValidationError for anything off-contract."""
    return _QUOTA_RESPONSE.validate_json(payload)
