"""Limits and durations of the system, one place for each: what a
request may carry, what a call may produce, how long things wait or live. Names are
`sandbox_common.naming`'s. Stdlib only (nothing at all)."""

from __future__ import annotations

# --- requests ------------------------------------------------------------------------
MAX_CODE_BYTES = 256 * 1024  # user code, UTF-8
MAX_INPUT_FILES = 20  # entries of execute_code.files
MAX_INLINE_INPUT_BYTES = 3 * 1024 * 1024  # decoded total of every content_base64
MAX_S3_INPUT_BYTES = 100 * 1024 * 1024  # one s3_uri input, checked inside the session
MAX_INPUT_PATH_BYTES = 255

# --- artifacts ---------------------------------------------------------------------
MAX_ARTIFACTS = 20  # stored artifacts per call
MAX_ARTIFACT_BYTES = 25 * 1024 * 1024
PRESIGNED_URL_SECONDS = 900  # get_file URLs: valid ≤ 15 minutes

# --- programmatic tool calling: bounds of one execute_code that calls tools -----------------
TOOLS_MAX_CALLS = 50
TOOLS_MAX_RESULT_BYTES = 1024 * 1024  # a tool result, serialized as compact JSON (UTF-8)
TOOLS_MAX_INPUT_BYTES = 256 * 1024  # a tool call's input, serialized (ours: bounds the marker)
# The wait bound is configurable per stage (StageConfig.tool_wait_seconds, at most this).
TOOLS_WAIT_SECONDS = 300
TOOLS_MAX_PER_TEMPLATE = 32

# --- background jobs ------------------------------------------------------------------------
MAX_RUNNING_JOBS_PER_TURN = 3
DEFAULT_JOB_TIMEOUT_SECONDS = 900
MAX_JOB_TIMEOUT_SECONDS = 3600
# get_job on a running job answers the last this-many bytes of each stream written so far.
JOB_PROGRESS_TAIL_BYTES = 32 * 1024

# --- quota -----------------------------------------------------------------------------------
# A counter item's TTL = its window's end + this grace (TTL deletion is lazy anyway; the window is
# part of the key, so an expired item is never read as a live count).
COUNTER_EXPIRY_GRACE_SECONDS = 3600
# A call's "counted" marker lives as long as its idempotency record
# (dispatch.idempotency.RECORD_TTL_SECONDS; a test keeps the two equal): a retry inside it is
# never counted twice.
QUOTA_MARKER_TTL_SECONDS = 24 * 3600

# --- sessions -------------------------------------------------------------------------------
SESSION_CAP_RETRY_SECONDS = 30  # a session-cap refusal asks the agent to retry this much later
REAPER_SCHEDULE_MINUTES = 5  # the session reaper's period
# The kill switch's reads of a tenant's caps and policy are cached at most this long (or the
# stage's cache TTL when lower), so a cap set to 0 reaches admitted work well within 60 s.
KILL_SWITCH_CACHE_SECONDS = 30
# A warm session is recycled this long before (session timeout − call timeout), and a first call
# claims one only with at least (call timeout + this) of life left.
WARM_RECYCLE_MARGIN_SECONDS = 60
# How many of the pool's sessions begin_turn reads to pick one at random (so turns begun together
# rarely pick the same one; a collision costs the loser the fallback query, never a shared session).
WARM_HINT_CANDIDATES = 10
# begin_turn's "pool empty" note is honoured this long (a stale one costs a cold start, never
# correctness).
WARM_POOL_EMPTY_MARK_SECONDS = 120

# --- retention ------------------------------------------------------------------------------------
FINDINGS_RETENTION_DAYS = 180  # backstop findings are security evidence: kept for the audit ceiling
