"""Tenants and agent principals are deployment data: each stage reads its tenants file, synth
refuses a bad one naming the field, and `sandboxctl tenant add|remove` edits that file and says
which deploy applies it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sandbox_common import naming as n

from infra.cdk import config as config_mod
from infra.cdk.config import ConfigError, build_config

REPO = Path(__file__).resolve().parents[2]
ACME = {"id": "acme", "environments": ["default-public"], "templates": {"analyst": "default-public"}}
GLOBEX = {"id": "globex", "environments": ["default-public"], "templates": {"analyst": "default-public"}}
ROLE = "arn:aws:iam::111122223333:role/agent-runtime"


def _write(path: Path, document: Any) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def _mentions(templates: dict[str, Any], word: str) -> list[str]:
    return [name for name, template in templates.items() if word in json.dumps(template)]


def test_prod_synthesizes_with_no_demo_tenant_and_dev_keeps_them(all_stages) -> None:
    # Given the committed tenants files / When every stage is synthesized (shared synth)
    prod, dev, local = all_stages["prod"], all_stages["dev"], all_stages["local"]
    # Then prod's templates name neither acme nor globex, while dev and local deploy both
    assert prod and _mentions(prod, "acme") == [] and _mentions(prod, "globex") == []
    for stage, templates in (("dev", dev), ("local", local)):
        shard = templates[n.shard_stack_name(stage, 0)]
        names = {r["Properties"].get("Name") for r in shard["Resources"].values()}
        assert {n.interpreter_name(stage, t, "default-public") for t in ("acme", "globex")} <= names


@pytest.mark.parametrize("stage", ["local", "dev", "staging", "prod"])
def test_every_stage_reads_its_tenants_from_its_file(stage: str) -> None:
    # Given a stage's config / When it is built
    config = build_config(stage)
    # Then its tenants are exactly its file's (the file is the only source)
    document = json.loads((REPO / config_mod.STAGES[stage]["tenants_file"]).read_text())
    assert config.tenants_file == config_mod.STAGES[stage]["tenants_file"]
    assert [t.id for t in config.tenants] == [t["id"] for t in document["tenants"] if "removed" not in t]
    assert len(config.agents) == len(document.get("agents", []))


@pytest.mark.parametrize(
    ("document", "field", "problem"),
    [
        ({"tenants": [ACME, GLOBEX, ACME]}, "tenants[2].id", "repeats tenants[0]"),
        (
            {"tenants": [ACME, {"id": "x", "environments": ["default-public", "everywhere"]}]},
            "tenants[1].environments[1]",
            "'everywhere' is not one of",
        ),
        (
            {
                "tenants": [
                    {"id": "x", "environments": ["default-public"], "templates": {"a": "internal-only"}}
                ]
            },
            "tenants[0].templates.a",
            "environment 'internal-only' is not declared",
        ),
        (
            {"tenants": [ACME], "agents": [{"principal": "arn:aws:iam::111122223333:user/bob"}]},
            "agents[0].principal",
            "is not an IAM role ARN",
        ),
        (
            {"tenants": [ACME], "agents": [{"principal": "111122223333"}]},
            "agents[0].principal",
            "is not an IAM role ARN",
        ),
        (
            {"tenants": [ACME, GLOBEX], "agents": [{"principal": ROLE, "tenants": ["acme", "initech"]}]},
            "agents[0].tenants[1]",
            "unknown tenant 'initech'",
        ),
        # a removed tenant's slot still counts in the file's numbering, and is not a known tenant
        (
            {"tenants": [{"id": "old", "removed": True}, ACME, {"id": "y", "environments": ["nope"]}]},
            "tenants[2].environments[0]",
            "'nope' is not one of",
        ),
        (
            {
                "tenants": [{"id": "old", "removed": True}, ACME],
                "agents": [{"principal": ROLE, "tenants": ["old"]}],
            },
            "agents[0].tenants[0]",
            "unknown tenant 'old'",
        ),
        (
            {"tenants": [ACME], "agents": [{"principal": ROLE, "tenants": []}]},
            "agents[0].tenants",
            "empty scope",
        ),
        ({"tenants": [ACME], "extra": []}, "extra", "unknown key"),
    ],
)
def test_build_config_bad_tenants_file_refused_naming_the_field(
    tmp_path: Path, document: dict[str, Any], field: str, problem: str
) -> None:
    # Given a tenants file with one mistake
    path = _write(tmp_path / "tenants.json", document)
    # When the stage is built from it (what synth does first)
    with pytest.raises(ConfigError) as refused:
        build_config("dev", {"tenants_file": path})
    # Then the refusal names the field and the file
    message = str(refused.value)
    assert f"{field}: " in message and problem in message and path in message, message


def test_app_py_bad_tenants_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    # Given a tenants file whose agent scope names a tenant the stage does not have, passed the way
    # the CDK CLI passes `-c tenants_file=PATH`
    path = _write(tmp_path / "t.json", {"tenants": [ACME], "agents": [{"principal": ROLE, "tenants": ["x"]}]})
    context = {"stage": "dev", "tenants_file": path}
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path / "out")}
    # When app.py runs (what `cdk synth` runs)
    result = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    # Then it refuses with exit 2, naming the field, no traceback and no template written
    assert result.returncode == 2, result.stderr
    assert "agents[0].tenants[0]: unknown tenant 'x'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "out").glob("*.template.json"))


# --- sandboxctl tenant add|remove ---------------------------------------------------------------
@pytest.fixture
def repo_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stages' tenants files copied, and the config pointed at the copy (the real files are
    never edited by a test)."""
    shutil.copytree(REPO / config_mod.TENANTS_DIR, tmp_path / config_mod.TENANTS_DIR)
    monkeypatch.setattr(config_mod, "REPO_ROOT", tmp_path)
    return tmp_path


def _ctl(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from infra.sandboxctl.main import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_tenant_add_appears_in_the_next_synth_of_that_stage_only(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from infra.cdk.app_factory import synth_stage

    real = (REPO / "infra/tenants/dev.json").read_bytes()
    # Given the committed tenants files (copied)
    # When an operator adds a tenant to dev
    code, out, _ = _ctl(
        "--stage",
        "dev",
        "--json",
        "tenant",
        "add",
        "initech",
        "--template",
        "analyst=default-public",
        capsys=capsys,
    )
    # Then it says which deploy applies it: the shard stack the tenant lands in
    answer = json.loads(out)
    assert code == 0
    assert answer["stack"] == n.shard_stack_name("dev", 0)
    assert answer["apply"] == f"npx cdk deploy -c stage=dev {n.shard_stack_name('dev', 0)}"
    # And the next synth of dev has its interpreter; no other stage knows it
    dev = synth_stage("dev")
    shard = json.dumps(dev[n.shard_stack_name("dev", 0)])
    assert n.interpreter_name("dev", "initech", "default-public") in shard
    for other in ("local", "staging", "prod"):
        assert "initech" not in [t.id for t in build_config(other).tenants]
    # And the repository's own file was never touched
    assert (REPO / "infra/tenants/dev.json").read_bytes() == real


def test_tenant_add_refused_leaves_the_file_unchanged(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = repo_copy / "infra/tenants/dev.json"
    before = path.read_bytes()
    # When the tenant's template names an environment the tenant does not have, or the id exists
    bad_env = _ctl(
        "--stage",
        "dev",
        "tenant",
        "add",
        "initech",
        "--environment",
        "internal-only",
        "--template",
        "analyst=default-public",
        capsys=capsys,
    )
    taken = _ctl("--stage", "dev", "tenant", "add", "acme", capsys=capsys)
    bad_shape = _ctl("--stage", "dev", "tenant", "add", "x", "--template", "analyst", capsys=capsys)
    # Then each exits 1 with a one-line reason naming the field, and the file is as it was
    assert bad_env[0] == 1 and "tenants[3].templates.analyst: environment 'default-public'" in bad_env[2]
    assert taken[0] == 1 and "already in" in taken[2]
    assert bad_shape[0] == 1 and "expected NAME=ENV" in bad_shape[2]
    assert path.read_bytes() == before


def test_tenant_remove_keeps_later_tenants_in_their_shard_stacks(
    repo_copy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given dev with five tenants in shards of two
    monkeypatch.setitem(config_mod.STAGES, "dev", {**config_mod.STAGES["dev"], "tenants_per_shard": 2})
    for tenant in ("t3", "t4"):
        assert _ctl("--stage", "dev", "tenant", "add", tenant, capsys=capsys)[0] == 0
    before = build_config("dev")
    shards_before = {t.id: before.shard_of(t.id) for t in before.tenants}
    # When a tenant in the middle is removed
    code, out, _ = _ctl("--stage", "dev", "--json", "tenant", "remove", "globex", capsys=capsys)
    # Then it leaves its slot: every other tenant stays in its shard stack, and only globex's
    # shard needs a deploy
    after = build_config("dev")
    assert code == 0 and "globex" not in [t.id for t in after.tenants]
    assert {t.id: after.shard_of(t.id) for t in after.tenants} == {
        k: v for k, v in shards_before.items() if k != "globex"
    }
    assert json.loads(out)["apply"] == f"npx cdk deploy -c stage=dev {n.shard_stack_name('dev', 0)}"
    # When the last tenant of a shard goes (shard 1 held canary and t3), its stack is to be
    # destroyed, not deployed
    assert _ctl("--stage", "dev", "tenant", "remove", "canary", capsys=capsys)[0] == 0
    _, out, _ = _ctl("--stage", "dev", "--json", "tenant", "remove", "t3", capsys=capsys)
    assert json.loads(out)["apply"] == f"npx cdk destroy -c stage=dev {n.shard_stack_name('dev', 1)}"
    assert [i for i, _ in build_config("dev").shards()] == [0, 2]
    # And adding globex back takes its old slot (shard 0), not a new one at the end
    code, out, _ = _ctl("--stage", "dev", "--json", "tenant", "add", "globex", capsys=capsys)
    assert json.loads(out)["action"] == "restored" and json.loads(out)["stack"] == n.shard_stack_name(
        "dev", 0
    )


def test_tenant_remove_refuses_a_tenant_an_agent_is_scoped_to(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = repo_copy / "infra/tenants/dev.json"
    before = path.read_bytes()
    # Given dev, whose example scoped agent acts for acme / When acme is removed
    code, _, err = _ctl("--stage", "dev", "tenant", "remove", "acme", capsys=capsys)
    # Then it is refused naming the agent entry, and nothing changed
    assert code == 1 and "agents[1] is scoped to 'acme'" in err
    assert path.read_bytes() == before


def test_tenant_add_on_local_says_to_restart_the_local_stack(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _ctl("--stage", "local", "tenant", "add", "initech", capsys=capsys)
    assert code == 0 and "sandboxctl local down && sandboxctl local up" in out
