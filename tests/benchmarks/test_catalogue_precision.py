"""catalogue_precision: false-positive rate on benign realistic log lines, miss rate on tokens of
every class, and host-side `redact` throughput against a bare regex scan (same run, same text)."""

from __future__ import annotations

import base64
import hashlib
import random
import uuid

from sandbox_common.redaction import catalogue, findings

from ._report import best_seconds, emit

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
B64URL = ALNUM + "_-"


def _s(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def benign_line(rng: random.Random) -> str:
    kind = rng.randrange(10)
    if kind == 0:
        return (
            f"INFO request_id={uuid.UUID(int=rng.getrandbits(128))} status={rng.choice([200, 201, 404, 500])}"
        )
    if kind == 1:
        return (
            f"sha256={hashlib.sha256(rng.randbytes(16)).hexdigest()}"
            f" sha1={hashlib.sha1(rng.randbytes(8)).hexdigest()}"
        )
    if kind == 2:
        return "payload=" + base64.b64encode(rng.randbytes(rng.randrange(20, 400))).decode()
    if kind == 3:
        v = ".".join(str(rng.randrange(100)) for _ in range(rng.randrange(3, 5)))
        return (
            f"using numpy {v} pandas"
            f" {rng.randrange(3)}.{rng.randrange(30)}.{rng.randrange(10)}rc{rng.randrange(5)} build"
            f" {v}-{_s(rng, 'abcdef0123456789', 7)}"
        )
    if kind == 4:
        host = _s(rng, "abcdefghij", 8)
        return (
            f"GET https://api.{host}.example.com/v1/items/{rng.randrange(10**6)}?page={rng.randrange(9)} 200"
        )
    if kind == 5:
        return (
            f'File "/usr/lib/python3.12/site-packages/{_s(rng, "abcdefgh", 6)}/core.py", line'
            f" {rng.randrange(999)}, in run"
        )
    if kind == 6:
        return f"Authorization header missing; expected Bearer token for user {_s(rng, ALNUM, 10)}"
    if kind == 7:
        return (
            f"session={_s(rng, ALNUM, 24)}"
            f" trace=Root=1-{_s(rng, '0123456789abcdef', 8)}-{_s(rng, '0123456789abcdef', 24)}"
        )
    if kind == 8:
        return f"{rng.random():.6f},{rng.randrange(10**9)},{_s(rng, ALNUM, 12)},ok,{rng.random() * 100:.2f}"
    return (
        f"model.layers.{rng.randrange(32)}.self_attn.q_proj.weight shape=({rng.randrange(4096)},"
        f" {rng.randrange(4096)})"
    )


def token(rng: random.Random, cls: str) -> str:
    if cls == "github":
        return (
            rng.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + _s(rng, ALNUM, 36)
            if rng.random() < 0.8
            else "github_pat_" + _s(rng, ALNUM + "_", 82)
        )
    if cls == "slack":
        return (
            rng.choice(["xoxa-", "xoxb-", "xoxe-", "xoxp-", "xoxr-", "xoxs-", "xapp-"])
            + f"{rng.randrange(10**12)}-{_s(rng, ALNUM, 24)}"
        )
    if cls == "google_oauth":
        return "ya29." + _s(rng, B64URL, rng.randrange(40, 200))
    if cls == "bearer":
        sep = rng.choice([": ", ':"', '": "', "=", ":  "])
        header = rng.choice(["Authorization", "authorization", "AUTHORIZATION"])
        scheme = rng.choice(["Bearer", "bearer"])
        return f"{header}{sep}{scheme} {_s(rng, ALNUM + '-._~+/', rng.randrange(20, 300))}"
    if cls == "jwt":
        return "eyJ" + ".".join(_s(rng, B64URL, rng.randrange(16, 300)) for _ in range(3))
    return rng.choice(["AKIA", "ASIA"]) + _s(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)


def test_catalogue_precision(bench_full):
    # Given benign lines and tokens of every class
    rng = random.Random(20261121)
    n_lines = 100_000 if bench_full else 5_000
    lines = [benign_line(rng) for _ in range(n_lines)]
    per_class = 1_000 if bench_full else 100
    tokens = [(c.name, token(rng, c.name)) for c in catalogue.TOKEN_CLASSES for _ in range(per_class)]
    # When
    false_positives = sum(1 for line in lines if findings.scan(line))
    misses = sum(1 for cls, tok in tokens if cls not in {h.token_class for h in findings.scan(f"x {tok} y")})
    text = "\n".join(lines)
    while len(text) < (1 << 20):
        text += "\n" + text
    text = text[: 1 << 20]
    bare = best_seconds(lambda: catalogue._ALL.findall(text), repeat=3)
    redacted = best_seconds(lambda: catalogue.redact(text), repeat=3)
    ratio = bare / redacted  # redact throughput relative to a bare alternation scan
    fp_rate = false_positives / n_lines
    # Then
    emit(
        "catalogue_precision",
        target="fp_rate <= 0.001, misses == 0, redact throughput >= 0.5x bare regex scan (ratio)",
        ratio=ratio,
        lines=n_lines,
        false_positives=false_positives,
        fp_rate=round(fp_rate, 6),
        tokens=len(tokens),
        misses=misses,
        bare_scan_ms_per_mib=round(bare * 1e3, 2),
        redact_ms_per_mib=round(redacted * 1e3, 2),
    )
    assert misses == 0
    if bench_full:
        assert fp_rate <= 0.001
        assert ratio >= 0.5
