"""The runbooks are code: every file the alarms name exists, every command parses against the
real CLI definitions, every name is what naming.py produces, and every Logs Insights query reads
only fields our Lambdas emit ("every command in a runbook works as written")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sandbox_common import naming as n

from tests.runbooks import _checks as c

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "runbooks"
SOURCES = [
    *sorted((ROOT / "functions").rglob("*.py")),
    *sorted((ROOT / "layers/common/python").rglob("*.py")),
]
EXPECTED_FILES = sorted([n.OPERATOR_RUNBOOK, *n.ALARM_RUNBOOKS.values()])
ALARM_SECTIONS = ("## Meaning", "## First checks", "## Queries", "## Mitigation", "## Escalation")


def _read(name: str) -> str:
    return (RUNBOOKS / name).read_text(encoding="utf-8")


def _check_file(name: str) -> tuple[c.ShellState, list[c.Block]]:
    text = _read(name)
    blocks = c.fenced_blocks(text)
    state = c.ShellState()
    for block in blocks:
        if block.lang not in ("bash", "sql"):
            raise AssertionError(
                f"{name}:{block.line}: fence ```{block.lang} — commands go in ```bash, queries in ```sql"
            )
        if block.lang == "bash":
            for line in c.command_lines(block.body):
                try:
                    c.check_line(line, state)
                except AssertionError as exc:
                    raise AssertionError(f"{name}:{block.line}: {exc}") from None
    return state, blocks


def test_runbooks_exactly_one_file_per_alarm_plus_operator_runbook():
    # Given the alarm -> runbook map the observability construct uses
    # When listing runbooks/
    present = sorted(p.name for p in RUNBOOKS.glob("*.md"))
    # Then every named file exists and no alarm file exists that no alarm names
    assert present == EXPECTED_FILES


@pytest.mark.parametrize("name", EXPECTED_FILES)
def test_runbook_commands_parse_and_use_our_names(name):
    # Given one runbook
    # When every ```bash line is checked against sandboxctl's parser / botocore's models
    state, blocks = _check_file(name)
    # Then there was something to check, and every name in the text is one naming.py produces
    assert any(b.lang == "bash" for b in blocks), f"{name} has no commands"
    assert c.check_names_in_text(_read(name)) == []
    assert state.commands


@pytest.mark.parametrize("name", EXPECTED_FILES)
def test_runbook_insights_queries_read_only_emitted_fields(name):
    # Given one runbook's Logs Insights queries (```sql blocks and `aws logs start-query`)
    state, blocks = _check_file(name)
    queries = c.insights_queries(blocks, state)
    # When each is parsed
    uses = [c.check_insights_query(q) for q in queries]
    # Then there are queries to run, and (check_insights_query raises otherwise) every field they
    # read is one our logs emit
    assert uses, f"{name} has no Logs Insights query"


def test_runbook_query_fields_and_messages_exist_in_lambda_code():
    # Given every domain field and every `message`/`event` value the runbooks' queries rely on
    fields: set[str] = set()
    literals: set[tuple[str, str]] = set()
    for name in EXPECTED_FILES:
        state, blocks = _check_file(name)
        for query in c.insights_queries(blocks, state):
            use = c.check_insights_query(query)
            fields |= use.fields & c.DOMAIN_FIELDS
            literals |= {(f, v) for f, v in use.literals if f in ("message", "event")}
    source = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES)
    # When looking for them in the Lambda and common-layer source
    missing_fields = sorted(f for f in fields if not re.search(rf"""["']{f}["']|\b{f}=""", source))
    missing_messages = sorted(v for _, v in literals if f'"{v}"' not in source and f"'{v}'" not in source)
    # Then the docs describe logs the code really writes
    assert fields and literals
    assert missing_fields == []
    assert missing_messages == []


@pytest.mark.parametrize("alarm", sorted(n.ALARM_RUNBOOKS))
def test_alarm_runbook_has_sections_and_names_its_alarm(alarm):
    # Given one alarm's runbook
    text = _read(n.ALARM_RUNBOOKS[alarm])
    # When reading its structure
    # Then it has every section an on-call engineer looks for, names its alarm and links back
    assert [s for s in ALARM_SECTIONS if s not in text] == []
    assert n.alarm_name(c.EXAMPLE_STAGE, alarm) in text
    assert f"({n.OPERATOR_RUNBOOK})" in text


def test_operator_runbook_covers_every_required_topic():
    # Given the operator runbook
    text = _read(n.OPERATOR_RUNBOOK)
    state, _ = _check_file(n.OPERATOR_RUNBOOK)
    commands = [" ".join(argv) for argv in state.commands]
    # When looking for each topic the operator runbook must cover
    # Then each is there, with the commands that do it
    for topic in (
        "tenant disable",
        "tenant enable",
        "tenant set-tier",
        "caps set",
        "caps get",
        "caps unset",
        "pilot",
        "audit list",
        "audit replay",
        "findings list",
        "counters show",
        "template put",
    ):
        assert any(f"sandboxctl --stage prod {topic}" in cmd for cmd in commands), topic
    assert any("caps set tenant_daily 0 --tenant acme" in cmd for cmd in commands)  # kill switch, per tenant
    assert any(cmd.endswith("caps set tenant_daily 0") for cmd in commands)  # kill switch, global
    for index in n.INVOCATIONS.indexes:
        assert any(f"--index-name {index.name}" in cmd for cmd in commands), index.name
    for phrase in (
        "T2",
        "T3",
        "stdout-bypass",
        "os.write",
        "page platform security",
        "tenant_disabled",
        "interpreter_not_ready",
        "readiness_check_failed",
        "unknown",
        "within 60 s",
    ):
        assert phrase in text, phrase
    for link in n.ALARM_RUNBOOKS.values():
        assert f"({link})" in text, link


# --- the validators themselves must reject what would not work ---------------------------------
@pytest.mark.parametrize(
    "line",
    [
        "aws dynamodb query --table-name thinkwork-prod-sandbox_invocations --key-condition-expressio x",
        "aws dynamodb query --key-condition-expression 'tenant_id = :t'",  # required --table-name
        "aws dynamodb frobnicate --table-name thinkwork-prod-sandbox_invocations",
        "aws ssm put-parameter --name /thinkwork/prod/sandbox/caps/tenant_daily --type Strin --value 1",
        "aws ssm get-parameter --name /thinkwork/prod/sandbox/caps/daily",  # not a naming.py path
        "aws dynamodb get-item --table-name thinkwork-prod-invocations --key '{}'",  # wrong table name
        (
            "aws dynamodb query --table-name thinkwork-prod-sandbox_invocations --index-name by_time"
            ' --key-condition-expression \'tenant_id = :t\' --expression-attribute-values \'{":t": {"S":'
            ' "a"}}\''
        ),
        (
            "aws dynamodb query --table-name thinkwork-prod-sandbox_invocations --index-name by_session"
            ' --key-condition-expression \'tenant_id = :t\' --expression-attribute-values \'{":t": {"S":'
            ' "a"}}\''
        ),
        "aws dynamodb get-item --table-name thinkwork-prod-sandbox_invocations --key '{\"invocation_id\": '",
        (  # never emitted by agent_id
            "aws cloudwatch get-metric-statistics --namespace ThinkworkSandbox --metric-name"
            " SandboxCapExceeded --dimensions Name=agent_id,Value=a --start-time 2026-11-21T00:00:00Z"
            " --end-time 2026-11-21T01:00:00Z --period 60 --statistics Sum"
        ),
        (
            "aws cloudwatch get-metric-statistics --namespace ThinkworkSandbox --metric-name"
            " TokenShapedStringDetected --dimensions Name=token_class,Value=gitlab --start-time"
            " 2026-11-21T00:00:00Z --end-time 2026-11-21T01:00:00Z --period 60 --statistics Sum"
        ),
        "aws cloudwatch describe-alarms --alarm-names thinkwork-prod-sandbox-everything",
        "aws lambda get-function-configuration --function-name thinkwork-prod-quota",
        (  # fields our logs do not emit
            "aws logs start-query --log-group-name /aws/lambda/thinkwork-prod-dispatch --start-time 1"
            " --end-time 2 --query-string 'fields tenant | filter x = 1'"
        ),
        "aws ssm get-parameter --name /thinkwork/prod/sandbox/caps/tenant_daily --query 'Parameter.[Value'",
        "aws ssm get-parameter --name /thinkwork/prod/sandbox/caps/tenant_daily | cat",
        'aws logs get-query-results --query-id "$UNDEFINED"',
        "sandboxctl --stage prod caps set tenant_daily -1",
        "sandboxctl --stage prod tenant show <tenant>",
        "sandboxctl caps get",  # no stage
        'sandboxctl --stage prod invoke \'{"action": "execute_code", "tenant_id": "acme"}\'',
        # no token
        'sandboxctl --stage prod invoke \'{"action": "end_turn", "tenant_id": "acme", "turn_id": "t1"}\'',
        "curl https://example.com",
        "date -d 'not a date at all' +%s",
    ],
)
def test_checks_reject_commands_that_would_not_work(line):
    # Given a command line that would fail (or do something else) when an operator runs it
    # When checking it
    # Then the check fails
    with pytest.raises(AssertionError):
        c.check_line(line, c.ShellState())


def test_checks_accept_substitution_and_variables():
    # Given a two-line recipe: capture an id, then use it
    state = c.ShellState()
    c.check_line(
        "QUERY_ID=$(aws logs start-query --log-group-name /aws/lambda/thinkwork-prod-dispatch"
        " --start-time $(date -u -d '1 hour ago' +%s) --end-time $(date -u +%s)"
        " --query-string 'fields tenant_id | filter error = \"SandboxError\"' --query queryId --output text)",
        state,
    )
    # When the variable is used
    c.check_line('aws logs get-query-results --query-id "$QUERY_ID"', state)
    # Then both commands were checked and the variable was defined by the first
    assert [argv[:3] for argv in state.commands] == [
        ["date", "-u", "-d"],
        ["date", "-u", "+%s"],
        ["aws", "logs", "start-query"],
        ["aws", "logs", "get-query-results"],
    ]
    assert "QUERY_ID" in state.variables


@pytest.mark.parametrize(
    "query",
    [
        "fields @timestamp, tenant | limit 5",  # not a field we emit
        "fields @timestamps",  # not a system field
        "fields tenant_id | filter message = 'x' | stats cnt(*) by tenant_id",  # unknown function
        "fields tenant_id | grep x",  # unknown command
    ],
)
def test_insights_check_rejects_unknown_fields_and_commands(query):
    # Given a query that reads something our logs never contain
    # When checking it
    # Then it is rejected
    with pytest.raises(AssertionError):
        c.check_insights_query(query)


def test_insights_check_reads_aliases_regexes_and_literals():
    # Given a query with an alias, a regex and two literal comparisons
    query = (
        'fields @timestamp, tenant_id | filter event = "sandbox_cap_exceeded" and data like /a|b/'
        " | stats count() as refusals by tenant_id, bin(5m) | sort refusals desc"
    )
    # When checking it
    use = c.check_insights_query(query)
    # Then the alias and the regex are not mistaken for fields, and the literal is recorded
    assert use.fields == {"tenant_id", "event", "data"}
    assert ("event", "sandbox_cap_exceeded") in use.literals


def test_names_check_flags_unknown_resource_names():
    # Given prose that names resources naming.py does not produce
    text = (
        "see thinkwork-prod-sandbox_audit and /thinkwork/prod/sandbox/caps/daily,"
        " /aws/lambda/thinkwork-prod-api, metric SandboxCallsTotal, sandboxctl --stage dev caps get"
    )
    # When checking the names
    problems = c.check_names_in_text(text)
    # Then each one is reported
    assert len(problems) >= 5
    for bad in (
        "sandbox_audit",
        "/thinkwork/prod/sandbox/caps/daily",
        "/aws/lambda/thinkwork-prod-api",
        "SandboxCallsTotal",
        "--stage dev",
    ):
        assert any(bad in problem for problem in problems), (bad, problems)
