"""Security alerting and the log-side redaction layers of one stage.

- `security-alerts` SNS topic (customer-managed KMS key: CloudWatch alarms cannot publish to a
  topic encrypted with the AWS-managed SNS key) with the configured subscribers;
- the CloudWatch Logs data protection policy on every log group that can carry sandbox output
  (dispatch's), findings to an audit log group;
- the subscription filter that feeds those log groups to the backstop Lambda;
- one alarm per naming.ALARM_RUNBOOKS key, each naming its runbook, and the dashboard.

Metric names and dimension sets come from naming.METRIC_DIMENSIONS: an alarm on a dimension set
nobody emits never fires, so tests/infra checks every metric used here against that table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_logs_destinations as log_destinations
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from sandbox_common import dimensions
from sandbox_common import naming as n
from sandbox_common.errors import EXIT_STATUSES
from sandbox_common.redaction.catalogue import TOKEN_CLASSES
from sandbox_common.redaction.cloudwatch import data_protection_policy, subscription_filter_pattern

from infra.cdk.config import StageConfig
from infra.cdk.constructs.compute import ComputeConstruct, stage_log_group
from infra.cdk.constructs.state import StateConstruct, removal_policy

PERIOD = cdk.Duration.minutes(5)
# the `dimension` values SandboxCapExceeded is emitted with: every dimension, and unknown
CAP_DIMENSION_VALUES: tuple[str, ...] = (*dimensions.names(), dimensions.UNKNOWN)
MAX_ALARM_METRICS = 10  # CloudWatch limit on metrics inside one alarm's math expression
# Log groups that can carry sandbox output (stdout/stderr, failure reasons). The backstop's own
# group is deliberately not fed back to itself (it never logs a token, only fingerprints).
SANDBOX_OUTPUT_FUNCTIONS: tuple[str, ...] = (n.DISPATCH,)


def security_topic_arn(scope: Construct, stage: str) -> str:
    """The topic's ARN from its fixed name, so shard stacks alarm into it without an export."""
    return cdk.Stack.of(scope).format_arn(
        service="sns", resource=n.security_topic_name(stage), arn_format=cdk.ArnFormat.NO_RESOURCE_NAME
    )


def check_dimensions(name: str, dims: Mapping[str, str]) -> None:
    if tuple(sorted(dims)) not in {tuple(sorted(s)) for s in n.METRIC_DIMENSIONS[name]}:
        raise ValueError(
            f"{name} is never emitted with dimensions {sorted(dims)}; see naming.METRIC_DIMENSIONS"
        )


def sandbox_metric(
    name: str, dimensions: Mapping[str, str] | None = None, *, statistic: str = "Sum"
) -> cw.Metric:
    dims = dict(dimensions or {})
    check_dimensions(name, dims)
    return cw.Metric(
        namespace=n.METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map=dims or None,
        statistic=statistic,
        period=PERIOD,
    )


def runbook_description(key: str, summary: str) -> str:
    return f"{summary} Runbook: runbooks/{n.ALARM_RUNBOOKS[key]}"


def alarm_actions(scope: Construct, config: StageConfig, topic: sns.ITopic) -> list[cw.IAlarmAction]:
    """security-alerts plus any extra topic ARNs configured as subscribers."""
    actions: list[cw.IAlarmAction] = [cw_actions.SnsAction(topic)]
    for i, arn in enumerate(extra_alarm_topics(config)):
        actions.append(cw_actions.SnsAction(sns.Topic.from_topic_arn(scope, f"ExtraAlarmTopic{i}", arn)))
    return actions


def extra_alarm_topics(config: StageConfig) -> list[str]:
    """The configured subscribers that are SNS topics (alarms can only notify topics)."""
    return [arn for arn in config.alarm_sns_subscribers if ":sns:" in arn]


def cap_breach_spike_alarm_props(
    config: StageConfig, tenant_id: str, action_arns: list[str]
) -> dict[str, Any]:
    """Per-tenant refusal spike (L1 properties); lives in the tenant's shard stack, so adding a
    tenant changes one shard. Same metric and dimension set as `sandbox_metric` would build."""
    key = n.Alarm.CAP_BREACH_SPIKE
    dims = {"tenant_id": tenant_id}
    check_dimensions(n.METRIC_CAP_EXCEEDED, dims)
    return {
        "alarm_name": n.tenant_alarm_name(config.name, key, tenant_id),
        "alarm_description": runbook_description(
            key,
            f"Tenant {tenant_id}: {config.alarm_thresholds.cap_breach_spike_per_tenant}+ SandboxCapExceeded "
            "refusals in 5 minutes (runaway agent or a cap set too low).",
        ),
        "namespace": n.METRICS_NAMESPACE,
        "metric_name": n.METRIC_CAP_EXCEEDED,
        "dimensions": [{"name": k, "value": v} for k, v in dims.items()],
        "statistic": "Sum",
        "period": int(PERIOD.to_seconds()),
        "threshold": config.alarm_thresholds.cap_breach_spike_per_tenant,
        "comparison_operator": "GreaterThanOrEqualToThreshold",
        "evaluation_periods": 1,
        "treat_missing_data": "notBreaching",
        "alarm_actions": action_arns,
    }


def alarm_action_arns(scope: Construct, config: StageConfig) -> list[str]:
    """security-alerts plus any extra topic ARNs configured as subscribers (as plain ARNs)."""
    return [security_topic_arn(scope, config.name), *extra_alarm_topics(config)]


class ObservabilityConstruct(Construct):
    """Attributes: `topic`, `topic_key`, `findings_log_group`, `subscription_filters`,
    `alarms` (key -> Alarm), `dashboard`."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: StageConfig,
        state: StateConstruct,
        compute: ComputeConstruct,
    ) -> None:
        super().__init__(scope, id_)
        self._config = config
        self._state = state
        self._compute = compute
        self.topic_key, self.topic = self._build_topic()
        self._actions = alarm_actions(self, config, self.topic)
        self.findings_log_group = self._build_findings_log_group()
        self._protect_output_log_groups()
        self.subscription_filters = self._build_subscription_filters()
        self.alarms: dict[str, cw.Alarm] = {}
        self._build_alarms()
        self.dashboard = self._build_dashboard()

    # --- topic ------------------------------------------------------------------------------------
    def _build_topic(self) -> tuple[kms.Key, sns.Topic]:
        key = kms.Key(
            self,
            "AlertsKey",
            description=f"Encrypts the {n.security_topic_name(self._config.name)} topic",
            enable_key_rotation=True,
            removal_policy=removal_policy(self._config),
        )
        # CloudWatch alarms publish to the encrypted topic as the cloudwatch service principal.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy "*" means this key
                # only on behalf of this account's alarms (no confused deputy)
                conditions={"StringEquals": {"aws:SourceAccount": cdk.Stack.of(self).account}},
            )
        )
        topic = sns.Topic(
            self,
            "SecurityAlerts",
            topic_name=n.security_topic_name(self._config.name),
            display_name=f"Thinkwork sandbox security alerts ({self._config.name})",
            master_key=key,
            enforce_ssl=True,
        )
        for email in self._config.alarm_emails:
            topic.add_subscription(subscriptions.EmailSubscription(email))
        for i, arn in enumerate(self._config.alarm_sns_subscribers):
            if ":sqs:" in arn:
                topic.add_subscription(
                    subscriptions.SqsSubscription(sqs.Queue.from_queue_arn(self, f"Subscriber{i}", arn))
                )
            elif ":lambda:" in arn:
                topic.add_subscription(
                    subscriptions.LambdaSubscription(
                        lambda_.Function.from_function_arn(self, f"Subscriber{i}", arn)
                    )
                )
        return key, topic

    # --- logs: data protection and backstop feed ------------------------------------
    def _build_findings_log_group(self) -> logs.LogGroup:
        return stage_log_group(
            self, "DataProtectionFindings", n.findings_audit_log_group(self._config.name), self._config
        )

    def _protect_output_log_groups(self) -> None:
        policy = data_protection_policy(n.findings_audit_log_group(self._config.name))
        for logical in SANDBOX_OUTPUT_FUNCTIONS:
            group = self._compute.log_groups[logical]
            cfn = group.node.default_child
            assert isinstance(cfn, logs.CfnLogGroup)
            cfn.data_protection_policy = policy
            # The policy names the findings group as its audit destination: it must exist first.
            group.node.add_dependency(self.findings_log_group)

    def _build_subscription_filters(self) -> list[logs.SubscriptionFilter]:
        pattern = subscription_filter_pattern()
        destination = log_destinations.LambdaDestination(self._compute.backstop)
        return [
            logs.SubscriptionFilter(
                self,
                f"Backstop{_cid(logical)}",
                log_group=self._compute.log_groups[logical],
                destination=destination,
                filter_pattern=logs.FilterPattern.literal(pattern),
                filter_name=f"{n.PROJECT}-{self._config.name}-sandbox-backstop",
            )
            for logical in SANDBOX_OUTPUT_FUNCTIONS
        ]

    # --- alarms ---------------------------------------------------------------------------------
    def _alarm(self, key: str, summary: str, metric: cw.IMetric, threshold: float) -> cw.Alarm:
        alarm = cw.Alarm(
            self,
            f"Alarm{_cid(key)}",
            alarm_name=n.alarm_name(self._config.name, key),
            alarm_description=runbook_description(key, summary),
            metric=metric,
            threshold=threshold,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        for action in self._actions:
            alarm.add_alarm_action(action)
        self.alarms[key] = alarm
        return alarm

    @staticmethod
    def _sum(metrics: Mapping[str, cw.IMetric], label: str) -> cw.MathExpression:
        if len(metrics) > MAX_ALARM_METRICS:
            raise ValueError(
                f"{label}: {len(metrics)} metrics exceed the CloudWatch alarm limit of {MAX_ALARM_METRICS}"
            )
        # FILL(…, 0): a class with no datapoint in the period must not blank the whole sum.
        return cw.MathExpression(
            expression=" + ".join(f"FILL({k}, 0)" for k in metrics),
            using_metrics=dict(metrics),
            label=label,
            period=PERIOD,
        )

    def _build_alarms(self) -> None:
        self._build_leak_alarms()
        self._build_function_alarms()
        self._build_session_and_tenant_alarms()

    def _build_leak_alarms(self) -> None:
        """A secret may have left through the logs, or an audit row is missing."""
        c = self._compute
        self._alarm(
            n.Alarm.TOKEN_SHAPED_STRING_DETECTED,
            "The backstop found a token-shaped string in sandbox logs (any class). Treat as a possible leak.",
            self._sum(
                {
                    f"t{i}": sandbox_metric(n.METRIC_TOKEN_DETECTED, {"token_class": tc.name})
                    for i, tc in enumerate(TOKEN_CLASSES)
                },
                "token-shaped strings",
            ),
            1,
        )
        self._alarm(
            n.Alarm.BACKSTOP_ERRORS,
            "The redaction backstop Lambda failed or could not decode a log batch: a layer of redaction is"
            " blind.",
            self._sum(
                {
                    "errors": c.backstop.metric_errors(period=PERIOD, statistic="Sum"),
                    "decode": sandbox_metric(n.METRIC_BACKSTOP_DECODE_ERRORS),
                    "failed": c.backstop_failures.metric_approximate_number_of_messages_visible(
                        period=PERIOD, statistic="Maximum"
                    ),
                },
                "backstop errors",
            ),
            1,
        )
        self._alarm(
            n.Alarm.AUDIT_DLQ_NOT_EMPTY,
            "Audit rows failed to write and wait in the audit dead-letter queue; drain with `sandboxctl audit"
            " replay`.",
            self._state.audit_dlq.metric_approximate_number_of_messages_visible(
                period=PERIOD, statistic="Maximum"
            ),
            1,
        )

    def _build_function_alarms(self) -> None:
        """A Lambda of the call path, or the sessions it starts and stops, is failing."""
        th = self._config.alarm_thresholds
        c = self._compute
        self._alarm(
            n.Alarm.READINESS_CHECK_FAILURES,
            "Sessions failed the readiness preamble (in-sandbox redactor not confirmed); calls return"
            " SandboxProvisioning.",
            sandbox_metric(n.METRIC_READINESS_FAILED),
            th.readiness_failures,
        )
        self._alarm(
            n.Alarm.QUOTA_CHECK_ERRORS,
            "The quota-check Lambda errored or failed closed: calls are refused with dimension=unknown.",
            self._sum(
                {
                    "errors": c.quota.metric_errors(period=PERIOD, statistic="Sum"),
                    "failclosed": sandbox_metric(n.METRIC_QUOTA_FAIL_CLOSED),
                },
                "quota-check errors",
            ),
            th.quota_fail_closed,
        )
        self._alarm(
            n.Alarm.DISPATCH_ERRORS,
            "Dispatch failed on its own side: the Lambda errored or timed out, or it caught a failure of "
            "its turn store, pre-flight reads, idempotency store or an unexpected exception.",
            self._sum(
                {
                    "errors": c.dispatch.metric_errors(period=PERIOD, statistic="Sum"),
                    "internal": sandbox_metric(n.METRIC_DISPATCH_INTERNAL_ERRORS),
                },
                "dispatch errors",
            ),
            th.dispatch_errors,
        )
        self._alarm(
            n.Alarm.CAP_BREACH_SPIKE,
            "SandboxCapExceeded refusals across all tenants in 5 minutes reached the spike threshold; "
            "per-tenant alarms with the tenant id as suffix say which tenant.",
            self._sum(
                {
                    f"d{i}": sandbox_metric(n.METRIC_CAP_EXCEEDED, {"dimension": d})
                    for i, d in enumerate(CAP_DIMENSION_VALUES)
                },
                "cap refusals",
            ),
            th.cap_breach_spike_per_tenant,
        )
        self._alarm(
            n.Alarm.SESSION_STOP_FAILURES,
            "Stopping a Code Interpreter session failed; sessions may live until their timeout.",
            sandbox_metric(n.METRIC_SESSION_STOP_FAILED),
            th.session_stop_failures,
        )

    def _build_session_and_tenant_alarms(self) -> None:
        """Leaked sessions, turn tokens refused, egress refused, a tenant's budget crossed."""
        th = self._config.alarm_thresholds
        c = self._compute
        self._alarm(
            n.Alarm.SESSIONS_REAPED,
            f"The session reaper stopped {th.sessions_reaped}+ leaked sessions in 5 minutes (turn ended"
            " without a stop, expired start lease, or no owning turn), or the reaper itself failed.",
            cw.MathExpression(
                # any reaper error alone reaches the threshold: a reaper that does not run leaks silently
                expression=f"FILL(reaped, 0) + FILL(errors, 0) * {th.sessions_reaped}",
                using_metrics={
                    "reaped": sandbox_metric(n.METRIC_SESSIONS_REAPED),
                    "errors": c.reaper.metric_errors(period=PERIOD, statistic="Sum"),
                },
                label="leaked sessions reaped (+ reaper errors)",
                period=PERIOD,
            ),
            th.sessions_reaped,
        )
        self._alarm(
            n.Alarm.TURN_TOKEN_REJECTED,
            f"{th.turn_token_rejected}+ dispatch actions in 5 minutes were refused for a missing, malformed"
            " or wrong turn token: a caller guessing turns, or a client that lost its token.",
            sandbox_metric(n.METRIC_TURN_TOKEN_REJECTED),
            th.turn_token_rejected,
        )
        # the egress proxy refused a burst of connections or requests (metric by tenant says whose)
        self._alarm(
            n.Alarm.EGRESS_DENIED_BURST,
            f"The egress proxy refused {th.egress_denied_burst}+ connections or requests in 5 minutes:"
            " possible exfiltration attempt (code trying hosts its policy does not allow) or a policy"
            " missing a host. SandboxEgressDenied by tenant_id and the proxy's egress_denied log lines"
            " say whose and what.",
            sandbox_metric(n.METRIC_EGRESS_DENIED),
            th.egress_denied_burst,
        )
        # a tenant's estimated spend crossed its daily budget (reported, never refused)
        self._alarm(
            n.Alarm.DAILY_BUDGET_CROSSED,
            "A tenant's estimated sandbox spend today crossed its daily budget (SSM daily_budget_usd); "
            "calls are not refused. The metric by tenant_id and `sandboxctl usage` say which tenant.",
            sandbox_metric(n.METRIC_DAILY_BUDGET_CROSSED),
            1,
        )

    # --- dashboard ---------------------------------------------------------------------------------
    def _build_dashboard(self) -> cw.Dashboard:
        stage = self._config.name
        per_tenant_cost = cw.MathExpression(
            # SEARCH keeps the core stack independent of the tenant list (adding a tenant touches
            # only its shard) while still drawing one line per tenant.
            expression=(
                f"SEARCH('{{{n.METRICS_NAMESPACE},tenant_id}} MetricName=\"{n.METRIC_COST}\"', 'Sum', 3600)"
            ),
            using_metrics={},
            label="estimated cost (USD)",
            period=cdk.Duration.hours(1),
        )
        dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=f"{n.PROJECT}-{stage}-sandbox")
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Calls by exit_status",
                left=[
                    sandbox_metric(n.METRIC_CALLS, {"exit_status": s}).with_(label=s) for s in EXIT_STATUSES
                ],
                stacked=True,
                width=12,
            ),
            cw.GraphWidget(
                title="Cap breaches by dimension",
                left=[
                    sandbox_metric(n.METRIC_CAP_EXCEEDED, {"dimension": d}).with_(label=d)
                    for d in CAP_DIMENSION_VALUES
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Call duration (ms) p50 / p95",
                left=[sandbox_metric(n.METRIC_DURATION, statistic=p).with_(label=p) for p in ("p50", "p95")],
                width=8,
            ),
            cw.GraphWidget(
                title="Truncation rate (share of calls with stdout or stderr cut)",
                left=[sandbox_metric(n.METRIC_TRUNCATED, statistic="Average").with_(label="truncated")],
                width=8,
            ),
            cw.GraphWidget(
                title="Token-shaped findings by class",
                left=[
                    sandbox_metric(n.METRIC_TOKEN_DETECTED, {"token_class": tc.name}).with_(label=tc.name)
                    for tc in TOKEN_CLASSES
                ],
                width=8,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(title="Estimated cost per tenant (USD / hour)", left=[per_tenant_cost], width=12),
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=12),
        )
        return dashboard


def _cid(text: str) -> str:
    return "".join(part.capitalize() for part in text.replace("_", "-").split("-"))
