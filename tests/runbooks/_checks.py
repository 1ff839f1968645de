"""Validators for the commands and queries written in runbooks/.

The runbooks promise "every command works as written". AWS is unreachable from tests, so each
command is checked against the real definitions it will meet:

- `sandboxctl …` through the real argparse parser (`infra.sandboxctl.main.build_parser`);
  `invoke` events also through the real dispatch request model;
- `aws …` against botocore's service models (the same models the AWS CLI builds its options
  from: option = `xform_name(member, "-")`), plus the CLI's global options and pagination;
- `date …` (only GNU date, used for time ranges) is run for real;
- names in commands (tables, indexes, key attributes, functions, log groups, SSM paths, alarms,
  metrics, dimensions, stacks, outputs, interpreter ids) must be what naming.py produces;
- CloudWatch Logs Insights queries may only use fields our Lambdas emit.

A small shell subset is understood: `\\` continuations, `VAR=$(cmd)` assignments, `$(cmd)`
substitutions, `"$VAR"`. Pipes, redirections and `;`/`&&` are rejected, so a runbook cannot hide
an unchecked command behind them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sandbox_common import dimensions as cap_dimensions
from sandbox_common import naming as n
from sandbox_common.errors import EXIT_STATUSES, SandboxInvalidRequest

EXAMPLE_STAGE = "prod"
# The tenant the runbooks' examples act on: a prod stage declares no demo tenant, so its names are
# checked as the names naming.py gives that tenant, beside the configured tenants' own.
EXAMPLE_TENANT = "acme"


class RunbookError(AssertionError):
    """A runbook line that would not work as written."""


# --- markdown ----------------------------------------------------------------------------------
_FENCE_RE = re.compile(r"^```([A-Za-z0-9_-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int  # 1-based line of the opening fence


def fenced_blocks(text: str) -> list[Block]:
    return [
        Block(m.group(1).lower(), m.group(2), text.count("\n", 0, m.start()) + 1)
        for m in _FENCE_RE.finditer(text)
    ]


def command_lines(body: str) -> list[str]:
    """Logical command lines: `\\`-continuations joined, blank lines and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in body.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        if line and not line.startswith("#"):
            lines.append(line)
    if pending.strip():
        raise RunbookError(f"dangling line continuation: {pending!r}")
    return lines


# --- shell subset ------------------------------------------------------------------------------
_ASSIGN_RE = re.compile(r"^([A-Z_][A-Z0-9_]*)=(__SUB\d+__)$")
_VAR_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_OPERATOR_CHARS = set("();<>|&")


def _extract_substitutions(line: str) -> tuple[str, list[str]]:
    """Replace each top-level `$(...)` outside single quotes by `__SUB<i>__`."""
    out: list[str] = []
    subs: list[str] = []
    i, quote = 0, ""
    while i < len(line):
        ch = line[i]
        if quote == "'":
            if ch == "'":
                quote = ""
            out.append(ch)
            i += 1
            continue
        if ch == "'" and quote == "":
            quote = "'"
        elif ch == '"':
            quote = "" if quote == '"' else '"'
        elif ch == "$" and line.startswith("$(", i):
            depth, j, inner_quote = 1, i + 2, ""
            while j < len(line) and depth:
                c = line[j]
                if inner_quote:
                    if c == inner_quote:
                        inner_quote = ""
                elif c in "'\"":
                    inner_quote = c
                elif c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                j += 1
            if depth:
                raise RunbookError(f"unbalanced $( in: {line}")
            out.append(f"__SUB{len(subs)}__")
            subs.append(line[i + 2 : j - 1])
            i = j
            continue
        out.append(ch)
        i += 1
    if quote:
        raise RunbookError(f"unterminated quote in: {line}")
    return "".join(out), subs


def split_words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as exc:
        raise RunbookError(f"{exc}: {line}") from None
    for word in words:
        if word and set(word) <= _OPERATOR_CHARS:
            raise RunbookError(
                f"shell operator {word!r} is not allowed (one checked command per line): {line}"
            )
    return words


@dataclass
class ShellState:
    """Variables a runbook defined so far (VAR=$(cmd)); later lines may use "$VAR"."""

    variables: dict[str, str] = field(default_factory=dict)
    commands: list[list[str]] = field(default_factory=list)  # every checked argv, for name checks


def check_line(line: str, state: ShellState) -> None:
    text, subs = _extract_substitutions(line)
    outputs = [check_substitution(sub, state) for sub in subs]
    assign = _ASSIGN_RE.match(text.strip())
    if assign:
        state.variables[assign.group(1)] = outputs[int(assign.group(2)[5:-2])]
        return
    argv = [_expand(word, outputs, state) for word in split_words(text)]
    check_argv(argv, state)


def check_substitution(inner: str, state: ShellState) -> str:
    text, subs = _extract_substitutions(inner)
    outputs = [check_substitution(sub, state) for sub in subs]
    argv = [_expand(word, outputs, state) for word in split_words(text)]
    return check_argv(argv, state)


def _expand(word: str, outputs: list[str], state: ShellState) -> str:
    word = re.sub(r"__SUB(\d+)__", lambda m: outputs[int(m.group(1))], word)

    def var(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in state.variables:
            raise RunbookError(f"${name} is used before a line of the runbook defines it")
        return state.variables[name]

    return _VAR_RE.sub(var, word)


def check_argv(argv: list[str], state: ShellState) -> str:
    """Validate one command; returns a stand-in for its output (used by substitutions)."""
    if not argv:
        raise RunbookError("empty command")
    state.commands.append(argv)
    tool = argv[0]
    if tool == "sandboxctl":
        check_sandboxctl(argv[1:])
        return "sandboxctl-output"
    if tool == "aws":
        check_aws(argv[1:])
        return "aws-output"
    if tool == "date":
        return run_date(argv[1:])
    raise RunbookError(f"{tool!r} is not a CLI the runbook test understands (sandboxctl, aws, date)")


def run_date(args: list[str]) -> str:
    proc = subprocess.run(["date", *args], capture_output=True, text=True, timeout=10, check=False)
    if proc.returncode != 0:
        raise RunbookError(f"date {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


# --- sandboxctl --------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _sandboxctl_parser() -> argparse.ArgumentParser:
    """The real parser, built once: parsing never changes it, and building it per command line
    (a subparser per command) was most of the runbook checks' time."""
    from infra.sandboxctl.main import build_parser

    return build_parser()


def check_sandboxctl(args: list[str]) -> Any:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            ns = _sandboxctl_parser().parse_args(args)
    except SystemExit:
        raise RunbookError(f"sandboxctl {' '.join(args)}: {stderr.getvalue().strip()}") from None
    if not (getattr(ns, "stage", None) or getattr(ns, "local", None)):
        raise RunbookError(f"sandboxctl {' '.join(args)}: say which stage (--stage NAME)")
    if ns.stage not in (None, EXAMPLE_STAGE, "local"):
        raise RunbookError(f"sandboxctl {' '.join(args)}: examples use --stage {EXAMPLE_STAGE}")
    if ns.command == "invoke":
        from sandbox_common.models import parse_dispatch_event

        try:
            request = parse_dispatch_event(ns.event)
        except SandboxInvalidRequest as exc:
            raise RunbookError(f"sandboxctl invoke: dispatch would refuse the event: {exc.message}") from None
        if getattr(request, "turn_id", None) and getattr(request, "turn_token", None) is None:
            raise RunbookError("sandboxctl invoke: a turn action without its turn_token is refused")
    return ns


# --- aws ---------------------------------------------------------------------------------------
# The AWS CLI's global options (v1 and v2 share these), with whether they take a value.
AWS_GLOBALS: dict[str, bool] = {
    "--region": True,
    "--output": True,
    "--query": True,
    "--profile": True,
    "--endpoint-url": True,
    "--color": True,
    "--cli-read-timeout": True,
    "--cli-connect-timeout": True,
    "--ca-bundle": True,
    "--no-paginate": False,
    "--debug": False,
    "--no-verify-ssl": False,
    "--no-sign-request": False,
}
AWS_OUTPUTS = ("json", "text", "table")
# The CLI's generic per-command options (not members of the input shape).
AWS_GENERIC: dict[str, bool] = {"--cli-input-json": True, "--generate-cli-skeleton": False}
AWS_PAGINATION: dict[str, bool] = {"--max-items": True, "--starting-token": True, "--page-size": True}
# CLI command names that differ from botocore service names.
AWS_SERVICE_ALIASES = {"s3api": "s3", "configservice": "config"}
# Customizations of single commands: extra positional arguments the CLI adds.
AWS_POSITIONALS: dict[tuple[str, str], int] = {("lambda", "invoke"): 1}  # outfile


@lru_cache(maxsize=1)
def _botocore_session() -> Any:
    import botocore.session

    return botocore.session.get_session()


@dataclass(frozen=True)
class AwsCommand:
    service: str
    operation: str  # botocore operation name (PascalCase)
    params: dict[str, list[str]]  # member name -> values
    global_opts: dict[str, str]


def parse_aws(args: list[str]) -> AwsCommand:
    from botocore import xform_name

    session = _botocore_session()
    global_opts: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word in AWS_GLOBALS:
            if AWS_GLOBALS[word]:
                if i + 1 >= len(args):
                    raise RunbookError(f"aws: {word} needs a value")
                global_opts[word] = args[i + 1]
                i += 2
                continue
            global_opts[word] = ""
        else:
            rest.append(word)
        i += 1
    if len(rest) < 2 or rest[0].startswith("-") or rest[1].startswith("-"):
        raise RunbookError(f"aws {' '.join(args)}: expected `aws <service> <operation> …`")
    cli_service, cli_operation, options = rest[0], rest[1], rest[2:]
    service = AWS_SERVICE_ALIASES.get(cli_service, cli_service)
    if service not in session.get_available_services():
        raise RunbookError(f"aws: unknown service {cli_service!r}")
    model = session.get_service_model(service)
    ops = {xform_name(op, "-"): op for op in model.operation_names}
    if cli_operation not in ops:
        raise RunbookError(f"aws {cli_service}: unknown operation {cli_operation!r}")
    operation = ops[cli_operation]
    op_model = model.operation_model(operation)
    shape = op_model.input_shape
    members = dict(shape.members) if shape is not None else {}
    by_option = {f"--{xform_name(name, '-')}": name for name in members}
    paginated = _is_paginated(service, operation)

    params: dict[str, list[str]] = {}
    positionals: list[str] = []
    i = 0
    while i < len(options):
        word = options[i]
        if not word.startswith("--"):
            positionals.append(word)
            i += 1
            continue
        if word in AWS_GENERIC or (paginated and word in AWS_PAGINATION):
            takes_value = AWS_GENERIC.get(word, AWS_PAGINATION.get(word, False))
            params[word] = [options[i + 1]] if takes_value and i + 1 < len(options) else []
            i += 2 if takes_value else 1
            continue
        negated = word.startswith("--no-") and f"--{word[5:]}" in by_option
        member_name = by_option.get(f"--{word[5:]}" if negated else word)
        if member_name is None:
            raise RunbookError(f"aws {cli_service} {cli_operation}: unknown option {word}")
        member = members[member_name]
        if member.type_name == "boolean":
            params[member_name] = ["false" if negated else "true"]
            i += 1
            continue
        values: list[str] = []
        i += 1
        while i < len(options) and not options[i].startswith("--"):
            values.append(options[i])
            i += 1
            if member.type_name != "list":
                break
        if not values:
            raise RunbookError(f"aws {cli_service} {cli_operation}: {word} needs a value")
        _check_value(f"aws {cli_service} {cli_operation} {word}", member, values)
        params[member_name] = values
    allowed_positionals = AWS_POSITIONALS.get((cli_service, cli_operation), 0)
    if len(positionals) != allowed_positionals:
        raise RunbookError(f"aws {cli_service} {cli_operation}: unexpected arguments {positionals}")
    if "--cli-input-json" not in params and shape is not None:
        missing = [m for m in shape.required_members if m not in params]
        if missing:
            raise RunbookError(f"aws {cli_service} {cli_operation}: missing required option(s) {missing}")
    if "--output" in global_opts and global_opts["--output"] not in AWS_OUTPUTS:
        raise RunbookError(f"aws: --output must be one of {AWS_OUTPUTS}")
    if "--query" in global_opts:
        import jmespath

        try:
            jmespath.compile(global_opts["--query"])
        except jmespath.exceptions.JMESPathError as exc:
            raise RunbookError(f"aws --query is not valid JMESPath: {exc}") from None
    return AwsCommand(service, operation, params, global_opts)


def _is_paginated(service: str, operation: str) -> bool:
    try:
        _botocore_session().get_paginator_model(service).get_paginator(operation)
    except Exception:  # noqa: BLE001 - no paginator model, or not a paginated operation
        return False
    return True


def _check_value(where: str, member: Any, values: list[str]) -> None:
    kind = member.type_name
    for value in values:
        if value.startswith(("file://", "fileb://")):
            continue
        if kind in ("integer", "long"):
            if not re.fullmatch(r"-?\d+", value):
                raise RunbookError(f"{where}: {value!r} is not an integer")
        elif kind == "timestamp":
            if not re.fullmatch(r"\d+|\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?(\.\d+)?(Z|[+-]\d\d:?\d\d)?", value):
                raise RunbookError(f"{where}: {value!r} is not a timestamp")
        elif kind == "string" and member.enum and value not in member.enum:
            raise RunbookError(f"{where}: {value!r} is not one of {member.enum}")
        elif kind in ("structure", "map") or (
            kind == "list" and member.member.type_name in ("structure", "map")
        ):
            inner = member if kind != "list" else member.member
            if value.lstrip().startswith(("{", "[")):
                try:
                    json.loads(value)
                except ValueError as exc:
                    raise RunbookError(f"{where}: not valid JSON ({exc})") from None
            elif inner.type_name == "structure":
                for pair in value.split(","):
                    key = pair.split("=", 1)[0]
                    if "=" not in pair or key not in inner.members:
                        raise RunbookError(
                            f"{where}: shorthand {pair!r} does not name a member of {list(inner.members)}"
                        )
        elif kind == "list" and member.member.type_name == "string" and member.member.enum:
            if value not in member.member.enum:
                raise RunbookError(f"{where}: {value!r} is not one of {member.member.enum}")


def check_aws(args: list[str]) -> AwsCommand:
    cmd = parse_aws(args)
    check_aws_names(cmd)
    return cmd


# --- names in aws commands ---------------------------------------------------------------------
def _one(cmd: AwsCommand, member: str) -> str | None:
    values = cmd.params.get(member)
    return values[0] if values else None


@lru_cache(maxsize=1)
def _token_classes() -> tuple[str, ...]:
    from sandbox_common.redaction.catalogue import TOKEN_CLASSES

    return tuple(c.name for c in TOKEN_CLASSES)


def known_log_groups(stage: str) -> set[str]:
    return {n.log_group_name(stage, f) for f in n.FUNCTIONS} | {n.findings_audit_log_group(stage)}


def known_parameters(stage: str, tenant: str = "acme") -> set[str]:
    paths = {d.parameter(stage) for d in cap_dimensions.dimensions()}
    paths |= {d.parameter(stage, tenant) for d in cap_dimensions.dimensions() if d.per_tenant}
    paths |= {n.cost_per_call_parameter(stage), n.tenant_substrate_parameter(stage, tenant)}
    paths |= {n.warm_sessions_parameter(stage, tenant, e) for e in n.ENVIRONMENTS}
    paths |= {n.tenant_daily_budget_parameter(stage, tenant)}
    return paths


def known_parameter_prefixes(stage: str) -> set[str]:
    """Paths `get-parameters-by-path` may read: every ancestor of a known parameter."""
    prefixes = set()
    for path in known_parameters(stage):
        parts = path.split("/")
        prefixes |= {"/".join(parts[:i]) for i in range(2, len(parts))}
    return prefixes


def _table(name: str, where: str) -> n.TableSpec:
    for spec in n.ALL_TABLES:
        if spec.physical(EXAMPLE_STAGE) == name:
            return spec
    raise RunbookError(f"{where}: table {name!r} is not a table naming.py defines for stage {EXAMPLE_STAGE}")


def check_aws_names(cmd: AwsCommand) -> None:
    where = f"aws {cmd.service} {cmd.operation}"
    p = cmd.params
    if "TableName" in p:
        spec = _table(p["TableName"][0], where)
        key_attrs = {spec.pk, *([spec.sk] if spec.sk else [])}
        index_name = _one(cmd, "IndexName")
        if index_name is not None:
            index = next((ix for ix in spec.indexes if ix.name == index_name), None)
            if index is None:
                raise RunbookError(f"{where}: {spec.logical} has no index {index_name!r}")
            key_attrs = {index.pk, *([index.sk] if index.sk else [])}
        names = json.loads(_one(cmd, "ExpressionAttributeNames") or "{}")
        values = json.loads(_one(cmd, "ExpressionAttributeValues") or "{}")
        expression = _one(cmd, "KeyConditionExpression")
        if expression is not None:
            used = _expression_attributes(expression, names)
            if not used or not used <= key_attrs or (spec.pk if index_name is None else index.pk) not in used:
                raise RunbookError(
                    f"{where}: key condition uses {sorted(used)}, the key is {sorted(key_attrs)}"
                )
            placeholders = set(re.findall(r":[A-Za-z0-9_]+", expression))
            if placeholders != set(values):
                raise RunbookError(f"{where}: placeholders {sorted(placeholders)} vs values {sorted(values)}")
        if "Key" in p:
            key = json.loads(p["Key"][0])
            if set(key) != key_attrs:
                raise RunbookError(f"{where}: --key {sorted(key)} but the table key is {sorted(key_attrs)}")
    for member in ("FunctionName",):
        if member in p and p[member][0] not in {n.function_name(EXAMPLE_STAGE, f) for f in n.FUNCTIONS}:
            raise RunbookError(f"{where}: function {p[member][0]!r} is not one of ours")
    for member in ("logGroupName", "logGroupNames"):
        for group in p.get(member, []):
            if group not in known_log_groups(EXAMPLE_STAGE):
                raise RunbookError(f"{where}: log group {group!r} is not one of ours")
    if cmd.service == "ssm":
        for path in p.get("Name", []) + p.get("Names", []):
            if path not in known_parameters(EXAMPLE_STAGE):
                raise RunbookError(f"{where}: parameter {path!r} is not a path naming.py produces")
        for path in p.get("Path", []):
            if path not in known_parameter_prefixes(EXAMPLE_STAGE):
                raise RunbookError(f"{where}: {path!r} is not a prefix of our parameters")
    for member in ("AlarmNames", "AlarmName"):
        for alarm in p.get(member, []):
            if alarm not in known_alarm_names(EXAMPLE_STAGE):
                raise RunbookError(f"{where}: alarm {alarm!r} is not one naming.ALARM_RUNBOOKS defines")
    if cmd.service == "cloudformation" and "StackName" in p:
        if not p["StackName"][0].startswith(n.stack_name(EXAMPLE_STAGE, "")):
            raise RunbookError(
                f"{where}: stack {p['StackName'][0]!r} is not a {n.stack_name(EXAMPLE_STAGE, '*')} stack"
            )
    for member in ("codeInterpreterId", "codeInterpreterIdentifier"):
        for ident in p.get(member, []):
            names_ = {n.interpreter_name(EXAMPLE_STAGE, "acme", env) for env in n.ENVIRONMENTS}
            if not any(ident.startswith(f"{name}-") for name in names_):
                raise RunbookError(
                    f"{where}: interpreter id {ident!r} does not start with our interpreter name"
                )
    if cmd.service == "cloudwatch" and _one(cmd, "Namespace") == n.METRICS_NAMESPACE:
        _check_metric(where, _one(cmd, "MetricName"), p.get("Dimensions", []))
    query = cmd.global_opts.get("--query", "")
    for output_key in re.findall(r"OutputKey\s*==\s*'([^']+)'", query):
        outputs = {v for k, v in vars(n).items() if k.startswith("OUTPUT_") and isinstance(v, str)}
        if output_key not in outputs and not output_key.startswith(n.OUTPUT_TABLE_PREFIX):
            raise RunbookError(f"{where}: stack output {output_key!r} is not one naming.py defines")
    for prefix in re.findall(r"starts_with\(StackName,\s*'([^']+)'\)", query):
        if prefix != n.stack_name(EXAMPLE_STAGE, ""):
            raise RunbookError(f"{where}: stack prefix {prefix!r} is not {n.stack_name(EXAMPLE_STAGE, '')!r}")
    if cmd.service == "logs" and "queryString" in p:
        check_insights_query(p["queryString"][0])


def _expression_attributes(expression: str, names: dict[str, str]) -> set[str]:
    words = re.findall(r"[#:]?[A-Za-z_][A-Za-z0-9_]*", expression)
    used = set()
    for word in words:
        if word.startswith(":") or word.upper() in ("AND", "BETWEEN", "OR", "NOT") or word == "begins_with":
            continue
        if word.startswith("#"):
            if word not in names:
                raise RunbookError(f"expression name {word} has no --expression-attribute-names entry")
            word = names[word]
        used.add(word)
    return used


def _check_metric(where: str, metric: str | None, dimensions: list[str]) -> None:
    if metric not in n.METRIC_DIMENSIONS:
        raise RunbookError(f"{where}: {metric!r} is not a metric naming.py defines")
    given: dict[str, str] = {}
    for dim in dimensions:
        pairs = dict(pair.split("=", 1) for pair in dim.split(","))
        given[pairs["Name"]] = pairs["Value"]
    if tuple(sorted(given)) not in {tuple(sorted(s)) for s in n.METRIC_DIMENSIONS[metric]}:
        raise RunbookError(
            f"{where}: {metric} is emitted with {n.METRIC_DIMENSIONS[metric]}, not {sorted(given)}"
        )
    allowed_values = {
        "token_class": _token_classes(),
        "exit_status": EXIT_STATUSES,
        "dimension": (*(d.name for d in cap_dimensions.calls()), cap_dimensions.UNKNOWN),
    }
    for name, value in given.items():
        if name in allowed_values and value not in allowed_values[name]:
            raise RunbookError(
                f"{where}: {name}={value!r} is never emitted (expected one of {allowed_values[name]})"
            )


# --- names anywhere in the text ----------------------------------------------------------------
def known_alarm_names(stage: str) -> set[str]:
    """The stage alarms plus the per-tenant cap-breach alarms of the stage's configured tenants."""
    from infra.cdk.config import build_config

    names = {n.alarm_name(stage, key) for key in n.ALARM_RUNBOOKS}
    tenants = {EXAMPLE_TENANT, *(t.id for t in build_config(stage).tenants)}
    names |= {n.tenant_alarm_name(stage, "cap-breach-spike", t) for t in tenants}
    return names


def known_physical_names(stage: str) -> set[str]:
    names = {spec.physical(stage) for spec in n.ALL_TABLES}
    names |= {n.function_name(stage, f) for f in n.FUNCTIONS}
    names |= known_alarm_names(stage)
    names |= {n.audit_dlq_name(stage), n.backstop_failures_queue_name(stage), n.security_topic_name(stage)}
    return names


def metric_like_words_allowed() -> set[str]:
    from sandbox_common import errors

    allowed = set(n.METRIC_DIMENSIONS)
    allowed |= {
        name for name, obj in vars(errors).items() if isinstance(obj, type) and name.startswith("Sandbox")
    }
    allowed |= {v for k, v in vars(n).items() if k.startswith("OUTPUT_") and isinstance(v, str)}
    return allowed


def check_names_in_text(text: str) -> list[str]:
    """Problems with resource names anywhere in a runbook (prose, tables, code)."""
    problems = []
    stage = EXAMPLE_STAGE
    physical = known_physical_names(stage)
    for name in set(re.findall(rf"\b{n.PROJECT}-{stage}-[A-Za-z0-9_-]*", text)):
        if name not in physical and not (
            name.endswith(("-", "_")) and any(p.startswith(name) for p in physical)
        ):
            problems.append(f"unknown resource name {name!r}")
    paths = known_parameters(stage) | known_parameter_prefixes(stage) | {n.findings_audit_log_group(stage)}
    for path in set(re.findall(rf"/{n.PROJECT}/{stage}/[A-Za-z0-9_/.-]*", text)):
        path = path.rstrip("/.")
        if path not in paths:
            problems.append(f"unknown SSM path or log group {path!r}")
    for group in set(re.findall(r"/aws/lambda/[A-Za-z0-9_-]+", text)):
        if group not in known_log_groups(stage):
            problems.append(f"unknown log group {group!r}")
    for stack in set(re.findall(rf"\bSandbox-{stage}-[A-Za-z0-9]*", text)):
        if stack != n.stack_name(stage, "") and not re.fullmatch(
            rf"Sandbox-{stage}-(Tenants\d{{3}}|[A-Z][A-Za-z]+)", stack
        ):
            problems.append(f"unknown stack name {stack!r}")
    allowed_words = metric_like_words_allowed()
    for word in set(
        re.findall(r"\b(?:Sandbox[A-Z][A-Za-z]+|TokenShapedStringDetected|Backstop[A-Z][A-Za-z]+)\b", text)
    ):
        if word not in allowed_words:
            problems.append(
                f"{word!r} is neither a metric, an error class nor a stack output naming.py/errors.py define"
            )
    for stage_word in set(re.findall(r"--stage\s+([A-Za-z0-9_-]+)", text)) - {stage}:
        problems.append(f"examples use --stage {stage}, found --stage {stage_word}")
    return problems


# --- CloudWatch Logs Insights -------------------------------------------------------------------
INSIGHTS_SYSTEM_FIELDS = {
    "@timestamp",
    "@message",
    "@logStream",
    "@log",
    "@ingestionTime",
    "@requestId",
    "@type",
    "@duration",
    "@billedDuration",
    "@memorySize",
    "@maxMemoryUsed",
    "@initDuration",
}
# Keys the Powertools logger adds to every line (and to exception lines).
POWERTOOLS_FIELDS = {
    "level",
    "location",
    "message",
    "timestamp",
    "service",
    "cold_start",
    "function_name",
    "function_memory_size",
    "function_arn",
    "function_request_id",
    "xray_trace_id",
    "exception",
    "exception_name",
    "stack_trace",
}
# Keys our Lambdas put on their log lines (dispatch per call + output chunks, quota refusals,
# audit dead-lettering, cap parameter problems, session stop/readiness, backstop findings).
DOMAIN_FIELDS = {
    "invocation_id",
    "session_id",
    "tenant_id",
    "agent_id",
    "turn_id",
    "call_id",
    "exit_status",
    "error",
    "duration_ms",
    "stdout_bytes",
    "stderr_bytes",
    "stdout_truncated",
    "stderr_truncated",
    "failure_reason",
    "stream",
    "chunk",
    "chunks",
    "data",
    "event",
    "dimension",
    "resets_at",
    "caps",
    "counts",
    "kill_switch",
    "fail_closed_reason",
    "cause",
    "dlq_error",
    "audit_row",
    "parameter",
    "reason",
    "last_known",
    "token_class",
    "fingerprint",
    "log_group",
    "log_stream",
    "event_id",
    "findings",
    "classes",
    "error_type",
    "skipped",
    # the reaper's lines and turn-token refusals
    "slot_id",
    "state",
    "source",
    "environment",
    "sweep",
    "refill",
    "hooks",
    "session_source",
    "retries",  # execute_code events of calls that got a new session
    "budget_usd",
    "estimated_spend_usd",
    "calls_today",  # daily budget crossed
    "job_id",  # background jobs: job_ended lines of dispatch and the reaper
    "ended",
    "failed",  # dispatch's sweep_paused_calls line
    "host",  # the egress proxy's egress_denied lines (with reason, source, session and tenant)
    "port",
}
INSIGHTS_COMMANDS = {"fields", "filter", "stats", "sort", "limit", "display", "parse", "dedup"}
INSIGHTS_FUNCTIONS = {
    "count",
    "count_distinct",
    "sum",
    "avg",
    "min",
    "max",
    "pct",
    "stddev",
    "earliest",
    "latest",
    "sortsfirst",
    "sortslast",
    "bin",
    "ispresent",
    "isempty",
    "isblank",
    "abs",
    "ceil",
    "floor",
    "concat",
    "strlen",
    "toupper",
    "tolower",
    "trim",
    "ltrim",
    "rtrim",
    "replace",
    "substr",
    "strcontains",
    "coalesce",
    "frommillis",
    "tomillis",
    "datefloor",
    "dateceil",
}
INSIGHTS_KEYWORDS = {"and", "or", "not", "like", "in", "by", "as", "asc", "desc", "true", "false"}

_INSIGHTS_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?P<bt>`[^`]+`)
    |(?P<num>\d+(?:\.\d+)?[a-z]*)
    |(?P<ident>@?[A-Za-z_][A-Za-z0-9_.]*)
    |(?P<op>!=|<=|>=|=~|[=<>+\-*/%(),|!\[\]])""",
    re.X,
)


def insights_allowed_fields() -> set[str]:
    emf = (
        set(n.METRIC_DIMENSIONS)
        | {d for sets in n.METRIC_DIMENSIONS.values() for s in sets for d in s}
        | {"_aws"}
    )
    return POWERTOOLS_FIELDS | DOMAIN_FIELDS | emf


@dataclass(frozen=True)
class InsightsUse:
    fields: frozenset[str]  # fields (top-level key) the query reads
    literals: frozenset[tuple[str, str]]  # (field, value) pairs of `field = "value"` comparisons


def _insights_tokens(query: str) -> Iterator[tuple[str, str]]:
    pos, prev = 0, ("", "")
    while pos < len(query):
        if query[pos] == "/" and (prev == ("ident", "like") or prev == ("op", "=~")):
            end = pos + 1
            while end < len(query) and query[end] != "/":
                end += 2 if query[end] == "\\" else 1
            if end >= len(query):
                raise RunbookError(f"unterminated regex in Insights query: {query}")
            prev = ("regex", query[pos : end + 1])
            yield prev
            pos = end + 1
            continue
        m = _INSIGHTS_TOKEN.match(query, pos)
        if not m:
            raise RunbookError(f"cannot read Insights query at {query[pos : pos + 20]!r}")
        pos = m.end()
        if m.lastgroup == "ws":
            continue
        prev = (m.lastgroup or "", m.group())
        if prev[0] == "ident" and prev[1].lower() == "like":
            prev = ("ident", "like")
        yield prev


def check_insights_query(query: str) -> InsightsUse:
    tokens = list(_insights_tokens(query))
    commands: list[list[tuple[str, str]]] = [[]]
    for tok in tokens:
        if tok == ("op", "|"):
            commands.append([])
        else:
            commands[-1].append(tok)
    allowed = insights_allowed_fields()
    aliases: set[str] = set()
    used: set[str] = set()
    literals: set[tuple[str, str]] = set()
    for command in commands:
        if not command or command[0][0] != "ident" or command[0][1] not in INSIGHTS_COMMANDS:
            raise RunbookError(f"Insights query: unknown command in {query!r}")
        body = command[1:]
        for i, (kind, value) in enumerate(body):
            if kind == "bt":
                kind, value = "ident", value.strip("`")
            if kind != "ident":
                continue
            nxt = body[i + 1] if i + 1 < len(body) else ("", "")
            prv = body[i - 1] if i > 0 else ("", "")
            if nxt == ("op", "("):
                if value.lower() not in INSIGHTS_FUNCTIONS:
                    raise RunbookError(f"Insights query: unknown function {value}()")
                continue
            if value.lower() in INSIGHTS_KEYWORDS:
                continue
            if prv[0] == "ident" and prv[1].lower() == "as":
                aliases.add(value)
                continue
            if command[0][1] == "parse" and any(t[1].lower() == "as" for t in body[:i]):
                aliases.add(value)
                continue
            if value in aliases:
                continue
            if value.startswith("@"):
                if value not in INSIGHTS_SYSTEM_FIELDS:
                    raise RunbookError(f"Insights query: {value} is not a system field")
                continue
            top = value.split(".", 1)[0]
            if top not in allowed:
                raise RunbookError(f"Insights query uses field {value!r}, which our logs do not emit")
            used.add(top)
            if nxt == ("op", "=") and i + 2 < len(body) and body[i + 2][0] == "str":
                literals.add((value, body[i + 2][1][1:-1]))
    return InsightsUse(frozenset(used), frozenset(literals))


def insights_queries(blocks: Iterable[Block], state: ShellState) -> list[str]:
    """Queries in ```sql blocks plus every `aws logs start-query --query-string` a runbook runs."""
    queries = [b.body.strip() for b in blocks if b.lang == "sql"]
    for argv in state.commands:
        if argv[:3] == ["aws", "logs", "start-query"] and "--query-string" in argv:
            queries.append(argv[argv.index("--query-string") + 1])
    return queries
