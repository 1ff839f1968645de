"""What every strict request model shares: the id type, the strict base model, loading an event,
and the sentence a validation error becomes (never echoing the offending input)."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from .errors import SandboxInvalidRequest
from .naming import REQUEST_ID_RE
from .redaction.catalogue import redact

Id = Annotated[str, StringConstraints(pattern=REQUEST_ID_RE.pattern)]
Model = TypeVar("Model", bound=BaseModel)


class StrictModel(BaseModel):
    """Unknown fields and wrong types are rejected; instances are frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


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


def load_event(event: Any) -> Any:
    """A Lambda event as given, or parsed when it arrives as JSON text."""
    if isinstance(event, (str, bytes, bytearray)):
        try:
            return json.loads(event)
        except (ValueError, UnicodeDecodeError):
            raise SandboxInvalidRequest("Invalid request: the event is not valid JSON.") from None
    return event


def load_object(event: Any) -> dict[str, Any]:
    """`event` as a JSON object (a dict, or JSON text of one); SandboxInvalidRequest otherwise."""
    event = load_event(event)
    if not isinstance(event, dict):
        raise SandboxInvalidRequest("Invalid request: the event must be a JSON object.")
    return event


def validate_event(model: type[Model], event: Any) -> Model:
    """`event` (a dict, or JSON text of one) as `model`; SandboxInvalidRequest with the sentence
    of describe_validation_error when it is not one."""
    event = load_object(event)
    try:
        return model.model_validate(event)
    except ValidationError as exc:
        raise SandboxInvalidRequest(describe_validation_error(exc)) from None
