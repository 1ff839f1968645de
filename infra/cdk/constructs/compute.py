"""The three Lambdas, each with its own least-privilege role and an explicit log group.

Permissions are granted here, next to the wiring that needs them (a lesson from the peer system:
a runtime role that lacks what the code calls). Dispatch holds NO bedrock-agentcore permission:
it reaches interpreters only through the session-runner role, assumed per tenant with a session
policy naming that tenant's interpreters (`constructs/runner_roles.py`).
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_lambda_event_sources as lambda_event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from sandbox_common import limits
from sandbox_common import naming as n

from infra.cdk.config import ConfigError, StageConfig
from infra.cdk.constructs.definitions import function_timeout_seconds
from infra.cdk.constructs.grants import allow, index_arns, ssm_parameter_arn
from infra.cdk.constructs.layer import ASSET_EXCLUDES, LayersConstruct, architecture, runtime
from infra.cdk.constructs.nag import acknowledge, finding_arn
from infra.cdk.constructs.state import StateConstruct, failure_queue, removal_policy
from infra.cdk.function_env import function_environment
from infra.cdk.layer_build import REPO_ROOT

FUNCTIONS_DIR = REPO_ROOT / "functions"
MEMORY_MB: dict[str, int] = {n.DISPATCH: 512, n.QUOTA_CHECK: 256, n.BACKSTOP: 256, n.REAPER: 256}
# Packages a function ships besides its own: dispatch and the reaper both run the shared run time
# (the session runner, a job's end, finishing interrupted calls: one AgentCore client, one
# tenant-credential path).
SHARED_PACKAGES: dict[str, tuple[str, ...]] = {
    n.DISPATCH: (n.SHARED_RUNTIME_PACKAGE,),
    n.REAPER: (n.SHARED_RUNTIME_PACKAGE,),
}

# What the session runner does to the egress table (functions/sandbox_runtime): put a credential,
# set its `revoked_at`, read the `counters` item. The proxy's own role (the egress construct) is the
# only one that writes counters and connections.
EGRESS_SESSION_ACTIONS: tuple[str, ...] = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
# Read, write and delete items by key (a store's conditional writes and transactions).
_WRITE_ITEM = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# Find what is left open through a sparse index, read it and end it with conditional updates.
_FINISH_BY_INDEX = ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query")

_RETENTION: dict[int, logs.RetentionDays] = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def log_retention(days: int) -> logs.RetentionDays:
    """CloudWatch Logs accepts only fixed retention values; anything else fails at synth."""
    try:
        return _RETENTION[days]
    except KeyError:
        raise ConfigError(
            f"log_retention_days {days} is not a CloudWatch Logs value; use one of {sorted(_RETENTION)}"
        ) from None


def stage_log_group(scope: Construct, id_: str, name: str, config: StageConfig) -> logs.LogGroup:
    """A log group of the stage: its retention, and removed with the stage where the stage says so."""
    return logs.LogGroup(
        scope,
        id_,
        log_group_name=name,
        retention=log_retention(config.log_retention_days),
        removal_policy=removal_policy(config),
    )


def function_code(logical: str, functions_dir: Path = FUNCTIONS_DIR) -> lambda_.Code:
    """`functions/` as Lambda sees it (/var/task), minus every other package there (the other
    functions', the egress proxy's, the egress setup's), so each function ships only its own code
    and its asset hash changes only when that code does."""
    return lambda_.Code.from_asset(
        str(functions_dir),
        exclude=[*other_packages(functions_dir, shipped_packages(logical)), *ASSET_EXCLUDES],
    )


def shipped_packages(logical: str) -> set[str]:
    return {n.FUNCTION_PACKAGES[logical], *SHARED_PACKAGES.get(logical, ())}


def other_packages(functions_dir: Path, shipped: set[str]) -> list[str]:
    """Every package directory of `functions/` but the shipped ones, sorted so the asset hash is
    stable (caches such as __pycache__ are ASSET_EXCLUDES' business, not a package)."""
    return sorted(
        p.name
        for p in functions_dir.iterdir()
        if p.is_dir() and p.name not in shipped and not p.name.startswith(("_", "."))
    )


class ComputeConstruct(Construct):
    """Attributes: `functions`, `roles`, `log_groups` (each keyed by logical function name)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: StageConfig,
        state: StateConstruct,
        layers: LayersConstruct,
        functions_dir: Path = FUNCTIONS_DIR,
    ) -> None:
        super().__init__(scope, id_)
        self._config = config
        self._state = state
        self._layers = layers
        self._functions_dir = functions_dir
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        self.log_groups: dict[str, logs.LogGroup] = {}
        # quota first: dispatch's environment names it.
        quota = self._build_function(n.QUOTA_CHECK, timeout=function_timeout_seconds(config, n.QUOTA_CHECK))
        self._grant_quota(quota)
        backstop = self._build_function(n.BACKSTOP, timeout=function_timeout_seconds(config, n.BACKSTOP))
        self._grant_backstop(backstop)
        self.backstop_failures = self._build_backstop_failures(backstop)
        dispatch = self._build_function(
            n.DISPATCH,
            timeout=function_timeout_seconds(config, n.DISPATCH),
            quota_function_name=quota.function_name,
            audit_dlq_url=state.audit_dlq.queue_url,
        )
        self._grant_dispatch(dispatch)
        reaper = self._build_function(
            n.REAPER,
            timeout=function_timeout_seconds(config, n.REAPER),
            audit_dlq_url=state.audit_dlq.queue_url,
        )  # a reaped job's row
        self._grant_reaper(reaper)
        self.reaper_schedule = self._build_reaper_schedule(reaper)
        self.kill_switch_rule = self._build_kill_switch_triggers(reaper)

    @property
    def dispatch(self) -> lambda_.Function:
        return self.functions[n.DISPATCH]

    @property
    def quota(self) -> lambda_.Function:
        return self.functions[n.QUOTA_CHECK]

    @property
    def backstop(self) -> lambda_.Function:
        return self.functions[n.BACKSTOP]

    @property
    def reaper(self) -> lambda_.Function:
        return self.functions[n.REAPER]

    # --- building blocks -----------------------------------------------------------------------
    def _build_function(
        self, logical: str, *, timeout: int, quota_function_name: str = "", audit_dlq_url: str = ""
    ) -> lambda_.Function:
        cid = _cid(logical)
        log_group = stage_log_group(
            self, f"{cid}Logs", n.log_group_name(self._config.name, logical), self._config
        )
        role = iam.Role(
            self,
            f"{cid}Role",
            role_name=n.function_role_name(self._config.name, logical),
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Least-privilege role of the {logical} Lambda",
        )
        # Only its own log group: no AWSLambdaBasicExecutionRole (logs:* on every group).
        log_group.grant_write(role)
        function = lambda_.Function(
            self,
            cid,
            function_name=n.function_name(self._config.name, logical),
            runtime=runtime(),
            architecture=architecture(self._config),
            handler=n.handler_string(logical),
            code=function_code(logical, self._functions_dir),
            layers=self._layers.all,
            role=role,
            log_group=log_group,
            timeout=cdk.Duration.seconds(timeout),
            memory_size=MEMORY_MB[logical],
            environment=function_environment(
                self._config,
                logical,
                tables=self._state.table_names,
                quota_function_name=quota_function_name,
                audit_dlq_url=audit_dlq_url,
            ),
            description=f"Thinkwork sandbox {logical} ({self._config.name})",
        )
        acknowledge(
            function,
            "AwsSolutions-L1",
            "Pinned to python3.13 on purpose: the deps layer is built for cp313 wheels "
            "(infra/cdk/layer_build.py), and the runtime is a product default; moving is a deliberate change "
            "of both.",
        )
        self.functions[logical] = function
        self.roles[logical] = role
        self.log_groups[logical] = log_group
        return function

    def _ssm_arn(self, path: str) -> str:
        return ssm_parameter_arn(self, path)

    def _table_arn(self, spec: n.TableSpec) -> str:
        return self._state.tables[spec.logical].table_arn

    # --- grants -----------------------------------------------------------------------------------
    def _grant_quota(self, fn: lambda_.Function) -> None:
        role = self.roles[n.QUOTA_CHECK]
        # Only this Lambda can write the counters (the quota check's transaction is the one writer
        # of usage): TransactWriteItems is authorised per item as UpdateItem / ConditionCheckItem.
        allow(
            role,
            "CounterCheckAndIncrement",
            ["dynamodb:UpdateItem", "dynamodb:ConditionCheckItem", "dynamodb:BatchGetItem"],
            *(self._table_arn(s) for s in (n.TENANT_DAILY_COUNTERS, n.AGENT_HOURLY_COUNTERS)),
        )
        # --- the turn-guarded, once-per-call_id count --------------------------------------------
        # The turn guard is a ConditionCheck on the turns table: that action only (it reads no
        # item back to the caller and writes nothing). The "counted" markers live in the
        # tenant-daily table (Put in the transaction; Get + Delete to release a count).
        allow(role, "TurnGuardConditionCheck", ["dynamodb:ConditionCheckItem"], self._table_arn(n.TURNS))
        # A disabled tenant is refused inside the count's transaction (a ConditionCheck on its
        # policy item, strongly consistent): no container's older pre-flight cache admits it.
        allow(role, "TenantPolicyConditionCheck", ["dynamodb:ConditionCheckItem"], self._table_arn(n.TENANTS))
        allow(
            role,
            "CountedMarkers",
            ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem"],
            self._table_arn(n.TENANT_DAILY_COUNTERS),
        )
        caps_path = f"{n.ssm_prefix(self._config.name)}/caps"
        caps_wildcard = self._ssm_arn(f"{caps_path}/*")
        allow(
            role,
            "ReadCaps",
            ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"],
            self._ssm_arn(caps_path),
            caps_wildcard,
        )
        _acknowledge_wildcard(
            role,
            f"Resource::{_nag_arn(self, caps_wildcard)}",
            "Caps live under one SSM path: the two globals and per-tenant overrides "
            "(caps/tenants/<id>/...) that operators add at run time without a redeploy.",
        )

    def _build_backstop_failures(self, fn: lambda_.Function) -> sqs.Queue:
        """The subscription filter invokes the backstop asynchronously: a batch that still fails
        after Lambda's retries lands here instead of vanishing (alarmed with backstop-errors)."""
        queue = failure_queue(
            self,
            "BackstopFailures",
            name=n.backstop_failures_queue_name(self._config.name),
            config=self._config,
            why_no_dlq=(
                "This queue IS the backstop's on-failure destination (failed log batches, kept 14 days "
                "and alarmed); a dead-letter queue of its own would only move the same messages again."
            ),
        )
        fn.configure_async_invoke(on_failure=destinations.SqsDestination(queue), retry_attempts=2)
        return queue

    def _grant_backstop(self, fn: lambda_.Function) -> None:
        # findings_store writes in batches only
        allow(
            self.roles[n.BACKSTOP], "WriteFindings", ["dynamodb:BatchWriteItem"], self._table_arn(n.FINDINGS)
        )

    def _grant_dispatch(self, fn: lambda_.Function) -> None:
        role = self.roles[n.DISPATCH]
        # Exactly the calls dispatch makes (checked by tests/infra against the code's boto3 calls):
        # pre-flight only reads tenant policy/templates (sandboxctl writes them, with history);
        # turns are read and conditionally written; Powertools idempotency uses Get/Put/Update/Delete.
        allow(
            role,
            "ReadTenantPolicy",
            ["dynamodb:BatchGetItem", "dynamodb:GetItem"],
            self._table_arn(n.TENANTS),
        )
        allow(
            role,
            "TurnState",
            ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
            self._table_arn(n.TURNS),
        )
        allow(
            role,
            "Idempotency",
            ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"],
            self._table_arn(n.IDEMPOTENCY),
        )
        # an allowlist session's proxy credential: issued (conditional put) when its session
        # starts, revoked when it stops, and its counters read around each call
        allow(role, "EgressCredentials", EGRESS_SESSION_ACTIONS, self._table_arn(n.EGRESS))
        # Background jobs: slots and job state are written in conditional transactions
        # (functions/dispatch/jobs.py); the by_open index feeds the reaper's finish_due_jobs.
        jobs = self._table_arn(n.JOBS)
        allow(
            role,
            "BackgroundJobs",
            [*_WRITE_ITEM, "dynamodb:ConditionCheckItem", "dynamodb:Query"],
            jobs,
            *index_arns(jobs, (i.name for i in n.JOBS.indexes)),
        )
        # Paused tool-calling calls: put a pause, claim it with one conditional update, find a
        # turn's paused calls through the by_turn index (end_turn) and the due ones through
        # by_wait_due (the sweep).
        continuations = self._table_arn(n.CONTINUATIONS)
        allow(
            role,
            "ToolCallContinuations",
            ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"],
            continuations,
            *index_arns(continuations, (i.name for i in n.CONTINUATIONS.indexes)),
        )
        # The session ledger (warm pools and the session caps): begin_turn queries the
        # by_warm_pool index for a hint; a first call claims a warm session (the hinted slot + the
        # turn binding in one transaction — UpdateItem on both tables, TurnState grants the turn's —
        # or, without a usable hint, query + one conditional UpdateItem) or reserves a cold slot
        # (one transaction: Put slot + Update both counters); a stopped session's slot is freed
        # (one transaction: Delete slot + Update both counters); a slot is read back by key.
        ledger = self._table_arn(n.SESSIONS)
        allow(
            role,
            "SessionLedger",
            [*_WRITE_ITEM, "dynamodb:Query"],
            ledger,
            *index_arns(ledger, [n.SESSIONS.indexes[0].name]),
        )
        # Append-only audit: PutItem only. IAM cannot require attribute_not_exists; the writer
        # always sends it, and the table's resource policy denies every other write.
        allow(role, "AppendAuditRows", ["dynamodb:PutItem"], self._table_arn(n.INVOCATIONS))
        allow(role, "InvokeQuotaCheck", ["lambda:InvokeFunction"], self.quota.function_arn)
        allow(role, "DeadLetterAuditRows", ["sqs:SendMessage"], self._state.audit_dlq.queue_arn)
        sandbox_params = self._ssm_arn(f"{n.ssm_prefix(self._config.name)}/*")
        allow(role, "ReadSandboxParameters", ["ssm:GetParameter", "ssm:GetParameters"], sandbox_params)
        _acknowledge_wildcard(
            role,
            f"Resource::{_nag_arn(self, sandbox_params)}",
            "Tenant substrates (tenants/<id>/substrate) are published by shard stacks as tenants are "
            "added; dispatch reads them and the cost price, all under this stage's sandbox prefix.",
        )

    def _build_reaper_schedule(self, fn: lambda_.Function) -> events.Rule:
        """Every 5 minutes: sweep leaked sessions, refill warm pools, run sweep hooks."""
        rule = events.Rule(
            self,
            "ReaperSchedule",
            schedule=events.Schedule.rate(cdk.Duration.minutes(limits.REAPER_SCHEDULE_MINUTES)),
            description="Session reaper: stop leaked sessions, free capacity, refill warm pools",
        )
        rule.add_target(targets.LambdaFunction(fn, retry_attempts=0))  # the next run is 5 minutes away
        return rule

    def _build_kill_switch_triggers(self, fn: lambda_.Function) -> events.Rule:
        """The kill switch reaches admitted work at once, not at the reaper's next scheduled run:
        any change of a caps parameter (EventBridge's `Parameter Store Change`) and any write of a
        tenant's policy item (the tenants table's stream, keys only, policy items only) invoke the
        reaper with the change; it reads the kill switch afresh and stops what is killed
        (`reaper.kill_switch_run`). `sandboxctl` sends the same run itself; these cover a change
        made any other way."""
        rule = events.Rule(
            self,
            "KillSwitchCapsChange",
            event_pattern=events.EventPattern(
                source=["aws.ssm"],
                detail_type=["Parameter Store Change"],
                detail={"name": events.Match.prefix(f"{n.ssm_prefix(self._config.name)}/caps/")},
            ),
            description="A caps parameter changed: the reaper stops the work of tenants a cap of 0 kills",
        )
        rule.add_target(targets.LambdaFunction(fn, retry_attempts=2))
        tenants = self._state.tables[n.TENANTS.logical]
        fn.add_event_source(
            lambda_event_sources.DynamoEventSource(
                tenants,
                starting_position=lambda_.StartingPosition.LATEST,
                batch_size=25,
                max_batching_window=cdk.Duration.seconds(0),
                retry_attempts=2,
                filters=[
                    lambda_.FilterCriteria.filter(
                        {
                            "dynamodb": {
                                "Keys": {
                                    n.TENANTS.sort_key: {
                                        "S": lambda_.FilterRule.is_equal(n.TENANT_POLICY_ITEM)
                                    }
                                }
                            }
                        }
                    )
                ],
            )
        )
        acknowledge(
            self.roles[n.REAPER],
            "AwsSolutions-IAM5[Resource::*]",
            "dynamodb:ListStreams, which the stream's event source mapping needs, has no resource-level "
            "permission; the stream itself is read only on the tenants table's stream ARN.",
        )
        return rule

    def _grant_reaper(self, fn: lambda_.Function) -> None:
        role = self.roles[n.REAPER]
        # The ledger: scan/read slots, claim-free transactions (per item Put/Update/Delete/Condition).
        allow(
            role,
            "SessionLedger",
            [
                "dynamodb:GetItem",
                "dynamodb:Scan",
                "dynamodb:Query",
                "dynamodb:BatchGetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:DeleteItem",
                "dynamodb:ConditionCheckItem",
            ],
            self._table_arn(n.SESSIONS),
        )
        allow(role, "ReadTurns", ["dynamodb:GetItem"], self._table_arn(n.TURNS))
        # Sessions the reaper starts (warm pools) or stops: their egress credentials, and the
        # counters a job's end reads for its row.
        allow(role, "EgressCredentials", EGRESS_SESSION_ACTIONS, self._table_arn(n.EGRESS))
        # The kill switch: a disabled tenant's jobs are cancelled and its warm pool emptied; the
        # operator's policy item is read by key (PreflightReader.tenant_enabled), nothing else.
        allow(role, "ReadTenantPolicy", ["dynamodb:GetItem"], self._table_arn(n.TENANTS))
        # Sessions with a running background job are spared: the sparse by_open index lists them.
        open_jobs_index = next(i.name for i in n.JOBS.indexes if i.pk == n.JOB_ATTR_OPEN)
        allow(
            role, "ReadOpenJobs", ["dynamodb:Query"], *index_arns(self._table_arn(n.JOBS), [open_jobs_index])
        )
        sandbox_path = n.ssm_prefix(self._config.name)
        sandbox_params = self._ssm_arn(f"{sandbox_path}/*")
        allow(
            role,
            "ReadSandboxParameters",
            ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"],
            self._ssm_arn(sandbox_path),
            sandbox_params,
        )
        self._grant_reaper_jobs(role)
        self._grant_reaper_interrupted(role)
        self._grant_reaper_paused(role)
        _acknowledge_wildcard(
            role,
            f"Resource::{_nag_arn(self, sandbox_params)}",
            "Warm-pool sizes (tenants/<id>/warm/<env>), session caps and tenant substrates are added per "
            "tenant at run time under this stage's sandbox prefix; the reaper only reads them.",
        )

    def _grant_reaper_jobs(self, role: iam.Role) -> None:
        """Background jobs: the reaper's job sweep finds jobs not yet final (by_open
        index), ends each one exactly once (JobStore.claim_end / mark_final: conditional Update
        transactions, then GetItem), writes its one audit row (append-only PutItem, the DLQ on
        failure) and spares the sessions of running jobs (JobStore.busy_sessions: the same query)."""
        jobs = self._table_arn(n.JOBS)
        allow(
            role,
            "EndBackgroundJobs",
            _FINISH_BY_INDEX,
            jobs,
            *index_arns(jobs, [n.JOBS_BY_OPEN.name]),
        )
        allow(role, "AppendAuditRows", ["dynamodb:PutItem"], self._table_arn(n.INVOCATIONS))
        allow(role, "DeadLetterAuditRows", ["sqs:SendMessage"], self._state.audit_dlq.queue_arn)

    def _grant_reaper_interrupted(self, role: iam.Role) -> None:
        """Interrupted calls: the reaper's interrupted_sweep lists calls claimed and never
        finished (the idempotency table's sparse by_open_attempt index), reads one record and
        finishes it with conditional UpdateItems; its row goes through the audit grants above."""
        idem = self._table_arn(n.IDEMPOTENCY)
        allow(
            role,
            "FinishInterruptedCalls",
            _FINISH_BY_INDEX,
            idem,
            *index_arns(idem, [n.IDEMPOTENCY_BY_OPEN_ATTEMPT.name]),
        )

    def _grant_reaper_paused(self, role: iam.Role) -> None:
        """Paused tool calls: the reaper's paused_sweep asks dispatch (which holds the
        continuations, runners, artifacts and audit grants) to end the calls past their wait bound."""
        allow(role, "SweepPausedToolCalls", ["lambda:InvokeFunction"], self.dispatch.function_arn)


def _cid(logical: str) -> str:
    return "".join(part.capitalize() for part in logical.replace("_", "-").split("-"))


def _nag_arn(scope: Construct, arn: str) -> str:
    return finding_arn(scope, arn)


def _acknowledge_wildcard(role: iam.Role, finding: str, reason: str) -> None:
    acknowledge(role, f"AwsSolutions-IAM5[{finding}]", reason)
