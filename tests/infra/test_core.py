"""The core stack: tables, append-only audit, least-privilege function roles, Lambdas that
resolve to real handlers, log-side redaction wiring, alarms and outputs."""

from __future__ import annotations

import fnmatch
import importlib
import re

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n
from sandbox_common.redaction.catalogue import TOKEN_CLASSES
from sandbox_common.redaction.cloudwatch import data_protection_policy, subscription_filter_pattern

from infra.cdk.config import build_config
from infra.cdk.constructs.definitions import global_parameters
from infra.cdk.constructs.egress_setup import setup_function_name
from infra.cdk.constructs.state import AUDIT_DENIED_ACTIONS
from infra.cdk.function_env import function_environment
from tests.infra._cfn import (
    allowed_actions,
    as_list,
    policy_statements,
    render,
    resources,
    statement_resources,
)
from tests.infra.conftest import STAGES


def _core(all_stages, stage):
    return all_stages[stage][n.stack_name(stage, "Core")]


def _table_ids(core) -> dict[str, str]:
    """physical table name -> logical resource id"""
    return {r["Properties"]["TableName"]: rid for rid, r in resources(core, "AWS::DynamoDB::Table").items()}


def _grants_on(core, table_id: str, actions: tuple[str, ...]) -> list[tuple[str, str]]:
    """(role, granted action) for every Allow on the table that covers one of `actions`
    (a granted wildcard such as dynamodb:* or dynamodb:*Item counts)."""
    hits = []
    for owner, st in policy_statements(core):
        if not any(r == f"<{table_id}.Arn>" or r == "*" for r in statement_resources(st)):
            continue
        for action in allowed_actions(st):
            if any(fnmatch.fnmatch(wanted, action) for wanted in actions):
                hits.append((owner, action))
    return hits


@pytest.mark.parametrize("stage", STAGES)
def test_tables_match_naming_specs(all_stages, stage: str) -> None:
    core = _core(all_stages, stage)
    tables = {r["Properties"]["TableName"]: r for r in resources(core, "AWS::DynamoDB::Table").values()}
    # Given every TableSpec / Then its table exists with those keys, TTL, GSIs and PITR, encrypted
    assert set(tables) == {spec.physical(stage) for spec in n.ALL_TABLES}
    for spec in n.ALL_TABLES:
        props = tables[spec.physical(stage)]["Properties"]
        keys = {k["KeyType"]: k["AttributeName"] for k in props["KeySchema"]}
        assert keys == ({"HASH": spec.pk, "RANGE": spec.sk} if spec.sk else {"HASH": spec.pk})
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["SSESpecification"] == {"SSEEnabled": True}
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": spec.pitr}
        if spec.ttl_attribute:
            assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
        gsis = {g["IndexName"]: g for g in props.get("GlobalSecondaryIndexes", [])}
        assert set(gsis) == {ix.name for ix in spec.indexes}
        for ix in spec.indexes:
            assert gsis[ix.name]["Projection"] == {"ProjectionType": "ALL"}
            assert [k["AttributeName"] for k in gsis[ix.name]["KeySchema"]] == [
                ix.pk,
                *([ix.sk] if ix.sk else []),
            ]


@pytest.mark.parametrize("stage", STAGES)
def test_audit_table_is_append_only(all_stages, stage: str) -> None:
    core = _core(all_stages, stage)
    physical = n.INVOCATIONS.physical(stage)
    audit = core["Resources"][_table_ids(core)[physical]]["Properties"]
    # Given the audit table / Then TTL on expires_at is the only deletion path
    assert audit["TimeToLiveSpecification"]["AttributeName"] == "expires_at"
    # And its resource policy denies every in-place write to everyone, on this table
    (deny,) = audit["ResourcePolicy"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    assert set(deny["Action"]) == set(AUDIT_DENIED_ACTIONS)
    assert render(deny["Resource"]).endswith(f":table/{physical}")
    # And no role is granted any of those writes on it (nor dynamodb:*)
    assert _grants_on(core, _table_ids(core)[physical], AUDIT_DENIED_ACTIONS) == []


@pytest.mark.parametrize("stage", STAGES)
def test_counters_are_written_only_by_the_quota_role(all_stages, stage: str) -> None:
    core = _core(all_stages, stage)
    roles = {
        r["Properties"]["RoleName"]: rid
        for rid, r in resources(core, "AWS::IAM::Role").items()
        if "RoleName" in r["Properties"]
    }
    quota_role = roles[n.function_role_name(stage, n.QUOTA_CHECK)]
    writes = (
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:PartiQLUpdate",
    )
    # The egress proxy adds its tenants' egress bytes to their own items of the tenant-daily
    # table, and only those (its statement's LeadingKeys condition: tests/infra/test_egress_infra.py).
    proxy_roles = {
        r["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0]
        for r in resources(core, "AWS::ECS::TaskDefinition").values()
    }
    for spec in (n.TENANT_DAILY_COUNTERS, n.AGENT_HOURLY_COUNTERS):
        # Given a counter table / Then only the quota role may write it (and the proxy its byte items)
        grants = _grants_on(core, _table_ids(core)[spec.physical(stage)], writes)
        others = {owner for owner, _ in grants} - {quota_role}
        assert grants and quota_role in {owner for owner, _ in grants}
        assert others <= (proxy_roles if spec is n.TENANT_DAILY_COUNTERS else set())
        table = f"<{_table_ids(core)[spec.physical(stage)]}.Arn>"
        for owner, st in policy_statements(core):
            if owner in others and table in statement_resources(st):
                assert st["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == [
                    "*#egress_daily_bytes#*"
                ]


@pytest.mark.parametrize("stage", STAGES)
def test_quota_role_may_only_condition_check_the_tenants_policy(all_stages, stage: str) -> None:
    # Given the quota role (its transaction refuses a disabled tenant on the policy item)
    core = _core(all_stages, stage)
    roles = {
        r["Properties"]["RoleName"]: rid
        for rid, r in resources(core, "AWS::IAM::Role").items()
        if "RoleName" in r["Properties"]
    }
    quota_role = roles[n.function_role_name(stage, n.QUOTA_CHECK)]
    tenants = f"<{_table_ids(core)[n.TENANTS.physical(stage)]}.Arn>"
    granted = {
        a
        for owner, st in policy_statements(core)
        if owner == quota_role and tenants in statement_resources(st)
        for a in allowed_actions(st)
    }
    # Then on the tenants table it may check a condition, and nothing else (no read, no write)
    assert granted == {"dynamodb:ConditionCheckItem"}


@pytest.mark.parametrize("stage", STAGES)
def test_no_function_role_uses_managed_policies_or_wildcard_actions(all_stages, stage: str) -> None:
    core = _core(all_stages, stage)
    roles, statements = resources(core, "AWS::IAM::Role"), list(policy_statements(core))
    assert roles and statements  # the loops below must run
    for rid, role in roles.items():
        # Given each role / Then no AWS managed policy (logs:* on every group and the like)
        assert "ManagedPolicyArns" not in role["Properties"], rid
    for owner, st in statements:
        # And no statement allows a service-wide wildcard action
        assert not [a for a in allowed_actions(st) if a == "*" or a.endswith(":*")], owner


@pytest.mark.parametrize("stage", STAGES)
def test_lambda_functions_resolve_to_importable_handlers(all_stages, stage: str) -> None:
    config = build_config(stage)
    core = _core(all_stages, stage)
    functions = {
        r["Properties"]["FunctionName"]: r["Properties"]
        for r in resources(core, "AWS::Lambda::Function").values()
    }
    # (a stage with an egress path also has its deploy-time custom resource, tests/infra/test_egress)
    setup = {setup_function_name(stage)} if config.egress is not None else set()
    assert set(functions) == {n.function_name(stage, f) for f in n.FUNCTIONS} | setup
    for logical in n.FUNCTIONS:
        props = functions[n.function_name(stage, logical)]
        # Given the deployed handler string / When it is imported the way Lambda does it
        module_name, attr = props["Handler"].rsplit(".", 1)
        handler = getattr(importlib.import_module(module_name), attr)
        # Then it is a callable, on python3.13 with both layers and the env the Lambda expects
        assert callable(handler)
        assert props["Runtime"] == "python3.13"
        assert props["Architectures"] == ["arm64" if config.architecture == "arm64" else "x86_64"]
        assert len(props["Layers"]) == 2
        expected_env = function_environment(config, logical, tables={s.logical: "x" for s in n.ALL_TABLES})
        assert set(props["Environment"]["Variables"]) == set(expected_env)
        assert props["LoggingConfig"]["LogGroup"]["Ref"] in core["Resources"]
    assert functions[n.function_name(stage, n.DISPATCH)]["Timeout"] > config.call_timeout_seconds
    assert functions[n.function_name(stage, n.QUOTA_CHECK)]["Timeout"] == 10


@pytest.mark.parametrize("stage", STAGES)
def test_log_groups_have_retention_and_dispatch_output_is_protected(all_stages, stage: str) -> None:
    config = build_config(stage)
    core = _core(all_stages, stage)
    groups = {
        r["Properties"]["LogGroupName"]: (rid, r["Properties"])
        for rid, r in resources(core, "AWS::Logs::LogGroup").items()
    }
    # Given every function's explicit log group / Then retention comes from the config
    for logical in n.FUNCTIONS:
        assert groups[n.log_group_name(stage, logical)][1]["RetentionInDays"] == config.log_retention_days
    # And dispatch's group (sandbox output) carries the catalogue's data protection policy
    dispatch_id, dispatch = groups[n.log_group_name(stage, n.DISPATCH)]
    assert dispatch["DataProtectionPolicy"] == data_protection_policy(n.findings_audit_log_group(stage))
    assert n.findings_audit_log_group(stage) in groups
    assert "DataProtectionPolicy" not in groups[n.log_group_name(stage, n.BACKSTOP)][1]
    # And a subscription filter feeds it to the backstop with the catalogue's prefilter
    (flt,) = resources(core, "AWS::Logs::SubscriptionFilter").values()
    backstop_id = next(
        rid
        for rid, r in resources(core, "AWS::Lambda::Function").items()
        if r["Properties"]["FunctionName"] == n.function_name(stage, n.BACKSTOP)
    )
    assert flt["Properties"]["LogGroupName"] == {"Ref": dispatch_id}
    assert flt["Properties"]["DestinationArn"] == {"Fn::GetAtt": [backstop_id, "Arn"]}
    assert flt["Properties"]["FilterPattern"] == subscription_filter_pattern()


def _alarm_metrics(alarm: dict) -> list[dict]:
    props = alarm["Properties"]
    if "MetricName" in props:
        return [props]
    return [q["MetricStat"]["Metric"] for q in props.get("Metrics", []) if "MetricStat" in q]


@pytest.mark.parametrize("stage", STAGES)
def test_alarms_one_per_runbook_key_with_sns_action_and_runbook(all_stages, stage: str) -> None:
    config = build_config(stage)
    templates = all_stages[stage]
    alarms = {
        r["Properties"]["AlarmName"]: r["Properties"]
        for t in templates.values()
        for r in resources(t, "AWS::CloudWatch::Alarm").values()
    }
    core = _core(all_stages, stage)
    topic_id = next(iter(resources(core, "AWS::SNS::Topic")))
    per_tenant = {n.tenant_alarm_name(stage, "cap-breach-spike", t.id) for t in config.tenants}
    # Given the alarm table / Then exactly these alarms exist: one per key plus one per tenant
    assert set(alarms) == {n.alarm_name(stage, key) for key in n.ALARM_RUNBOOKS} | per_tenant
    for name, props in alarms.items():
        key = next(k for k in n.ALARM_RUNBOOKS if name.startswith(n.alarm_name(stage, k)))
        # And each names its runbook, notifies security-alerts and ignores missing data
        assert f"runbooks/{n.ALARM_RUNBOOKS[key]}" in props["AlarmDescription"]
        actions = [render(a) for a in props["AlarmActions"]]
        assert actions and all(
            a == f"<{topic_id}>" or a.endswith(f":{n.PROJECT}-{stage}-security-alerts") for a in actions
        )
        assert props["TreatMissingData"] == "notBreaching"


@pytest.mark.parametrize("stage", STAGES)
def test_alarm_and_dashboard_metrics_use_emitted_dimension_sets(all_stages, stage: str) -> None:
    core = _core(all_stages, stage)
    emitted = {(m, tuple(sorted(dims))) for m, sets in n.METRIC_DIMENSIONS.items() for dims in sets}
    seen = set()
    for t in all_stages[stage].values():
        for alarm in resources(t, "AWS::CloudWatch::Alarm").values():
            for metric in _alarm_metrics(alarm):
                if metric.get("Namespace") != n.METRICS_NAMESPACE:
                    continue
                dims = tuple(sorted(d["Name"] for d in metric.get("Dimensions", [])))
                # Given a sandbox metric an alarm watches / Then the code emits it with those dimensions
                assert (metric["MetricName"], dims) in emitted
                seen.add(metric["MetricName"])
    token_alarm = next(
        r
        for r in resources(core, "AWS::CloudWatch::Alarm").values()
        if r["Properties"]["AlarmName"] == n.alarm_name(stage, "token-shaped-string-detected")
    )
    classes = {d["Value"] for m in _alarm_metrics(token_alarm) for d in m["Dimensions"]}
    assert classes == {tc.name for tc in TOKEN_CLASSES}  # any class, summed
    assert {
        n.METRIC_TOKEN_DETECTED,
        n.METRIC_READINESS_FAILED,
        n.METRIC_SESSION_STOP_FAILED,
        n.METRIC_QUOTA_FAIL_CLOSED,
        n.METRIC_BACKSTOP_DECODE_ERRORS,
        n.METRIC_CAP_EXCEEDED,
        n.METRIC_DISPATCH_INTERNAL_ERRORS,
    } <= seen
    # And the one dashboard draws its panels
    (dashboard,) = resources(core, "AWS::CloudWatch::Dashboard").values()
    body = render(dashboard["Properties"]["DashboardBody"])
    for needle in (
        n.METRIC_CALLS,
        n.METRIC_CAP_EXCEEDED,
        "p95",
        n.METRIC_TRUNCATED,
        n.METRIC_TOKEN_DETECTED,
        n.METRIC_COST,
    ):
        assert needle in body


@pytest.mark.parametrize("stage", STAGES)
def test_security_topic_is_encrypted_and_ssl_only(all_stages, stage: str) -> None:
    core = _core(all_stages, stage)
    ((topic_id, topic),) = resources(core, "AWS::SNS::Topic").items()
    # Given the security-alerts topic / Then a rotating customer key encrypts it and SSL is enforced
    assert topic["Properties"]["TopicName"] == f"{n.PROJECT}-{stage}-{n.SECURITY_ALERTS_TOPIC}"
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    assert core["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    (policy,) = resources(core, "AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in statements
    )


@pytest.mark.parametrize("stage", STAGES)
def test_ssm_parameters_and_outputs_match_definitions(all_stages, stage: str) -> None:
    config = build_config(stage)
    core = _core(all_stages, stage)
    egress = {n.egress_network_parameter(stage, leaf) for leaf in n.EGRESS_NETWORK_PARAMETERS}
    params = {
        r["Properties"]["Name"]: r["Properties"]
        for r in resources(core, "AWS::SSM::Parameter").values()
        if r["Properties"]["Name"] not in egress  # what the egress path publishes: test_egress_infra
    }
    # Given the shared definitions / Then the caps and price are deployed as String parameters
    assert {k: v["Value"] for k, v in params.items()} == global_parameters(config)
    assert all(v["Type"] == "String" for v in params.values())
    assert params[dimensions.parameter(stage, dimensions.TENANT_DAILY.name)]["Value"] == "1000"
    assert params[dimensions.parameter(stage, dimensions.AGENT_HOURLY.name)]["Value"] == "100"
    assert params[n.cost_per_call_parameter(stage)]["Value"] == "0"
    # And sandboxctl finds every resource it needs from the outputs
    outputs = core["Outputs"]
    expected = {
        n.OUTPUT_STAGE,
        n.OUTPUT_DISPATCH_FUNCTION,
        n.OUTPUT_QUOTA_FUNCTION,
        n.OUTPUT_AUDIT_DLQ_URL,
        n.OUTPUT_SECURITY_TOPIC,
        n.OUTPUT_ARTIFACTS_BUCKET,
        n.OUTPUT_AGENT_INVOKE_POLICY,
    }
    if config.egress is not None:
        expected |= {n.OUTPUT_EGRESS_PROXY_URL, n.OUTPUT_PACKAGE_INDEX_URL}
    assert expected | {n.table_output_key(s.logical) for s in n.ALL_TABLES} == set(outputs)
    assert all(re.fullmatch(r"[A-Za-z0-9]+", k) for k in outputs)
    assert outputs[n.OUTPUT_STAGE]["Value"] == stage


@pytest.mark.parametrize("stage", STAGES)
def test_removal_policy_and_dlq_follow_stage_data(all_stages, stage: str) -> None:
    config = build_config(stage)
    core = _core(all_stages, stage)
    expected = "Retain" if config.removal_policy == "retain" else "Delete"
    # Given the stage's removal policy / Then stateful resources follow it (prod differs by data),
    # but for what every stage keeps: the audit table, the artifacts bucket and its key
    audit = n.INVOCATIONS.physical(stage)
    for rid, r in resources(core, "AWS::DynamoDB::Table").items():
        kept = r["Properties"]["TableName"] == audit
        assert r["DeletionPolicy"] == ("Retain" if kept else expected), rid
        assert r["UpdateReplacePolicy"] == ("Retain" if kept else expected), rid
    (bucket,) = [
        r
        for r in resources(core, "AWS::S3::Bucket").values()
        if "BucketName" in r["Properties"] and "artifacts" in render(r["Properties"]["BucketName"])
    ]
    keys = [
        r for r in resources(core, "AWS::KMS::Key").values() if "artifacts" in r["Properties"]["Description"]
    ]
    assert bucket["DeletionPolicy"] == "Retain" and [k["DeletionPolicy"] for k in keys] == ["Retain"]
    # Both queues (the audit DLQ and the backstop's on-failure queue) follow it too, encrypted
    # and SSL-only
    queues = {r["Properties"]["QueueName"]: r for r in resources(core, "AWS::SQS::Queue").values()}
    assert set(queues) == {n.audit_dlq_name(stage), n.backstop_failures_queue_name(stage)}
    for queue in queues.values():
        assert queue["DeletionPolicy"] == expected
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
    policies = resources(core, "AWS::SQS::QueuePolicy").values()
    assert len(policies) == 2 and all(
        any(
            s["Effect"] == "Deny" and "aws:SecureTransport" in str(s["Condition"])
            for s in as_list(qp["Properties"]["PolicyDocument"]["Statement"])
        )
        for qp in policies
    )
    # And the backstop's failed batches go to its queue, not nowhere
    (invoke_config,) = resources(core, "AWS::Lambda::EventInvokeConfig").values()
    assert "OnFailure" in invoke_config["Properties"]["DestinationConfig"]


@pytest.mark.parametrize("stage", STAGES)
def test_continuations_are_used_only_by_dispatch_with_exact_actions(all_stages, stage: str) -> None:
    # Given the continuations table of programmatic tool calling
    core = _core(all_stages, stage)
    table_id = _table_ids(core)[n.CONTINUATIONS.physical(stage)]
    dispatch_role = n.function_role_name(stage, n.DISPATCH)
    roles = {
        r["Properties"]["RoleName"]: rid
        for rid, r in resources(core, "AWS::IAM::Role").items()
        if "RoleName" in r["Properties"]
    }

    # When the grants on it are collected
    every = (
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:Query",
        "dynamodb:Scan",
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:PartiQLSelect",
    )
    grants = _grants_on(core, table_id, every)

    # Then only dispatch holds them: put, conditional claim, and the by_turn query (on the index too)
    assert grants
    assert {owner for owner, _ in grants} == {roles[dispatch_role]}
    assert sorted(action for _, action in grants) == [
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:UpdateItem",
    ]
    index_arn = f"<{table_id}.Arn>/index/{n.CONTINUATIONS.indexes[0].name}"
    assert any(index_arn in statement_resources(st) for _, st in policy_statements(core))
