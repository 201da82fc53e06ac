"""``embeval serve openvla|openai`` with hostile arguments: a port outside 1..65535, a NaN/inf/0/huge
``--max-body-mb``, an unresolvable or foreign ``--host``, a port in use. Each is one line naming the flag, exit 2,
no traceback, and nothing claims to be serving before the socket is bound."""
from __future__ import annotations

import math
import socket
from pathlib import Path

import pytest

from embeval_cli import main
from embeval.errors import ConfigError
from embeval.serving.limits import MiB, ServerLimits
from embeval.serving.runner import app_from_spec

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "config/subjects/image_stats_policy.yaml"
LLM = ROOT / "config/subjects/scripted_llm.yaml"


def _serve(capsys, protocol, *extra) -> tuple[int, str, str]:
    spec = POLICY if protocol == "openvla" else LLM
    try:
        rc = main(["serve", protocol, "--subject", str(spec), *map(str, extra)])
    except SystemExit as exc:  # argparse refuses the value
        rc = exc.code
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err, cap.err
    return rc, cap.out, cap.err


def _last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("protocol", ["openvla", "openai"])
@pytest.mark.parametrize("value, problem", [
    ("-1", "must lie in 1..65535, got -1 (a TCP port)"),
    ("70000", "must lie in 1..65535, got 70000 (a TCP port)"),
    ("0", "must lie in 1..65535, got 0 (a TCP port)"),
    ("http", "must be an integer in 1..65535, got 'http' (a TCP port)"),
])
def test_port_out_of_range_is_refused_at_parsing(capsys, protocol, value, problem):
    rc, out, err = _serve(capsys, protocol, "--port", value)
    assert rc == 2 and out == ""
    assert _last_line(err) == f"embeval serve {protocol}: error: argument --port: {problem}"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-3", "1025", "1e308", "big"])
def test_max_body_mb_must_be_finite_positive_and_bounded(capsys, value):
    from embeval.serving.limits import MAX_BODY_MB

    rc, out, err = _serve(capsys, "openvla", "--max-body-mb", value)
    assert rc == 2 and out == ""
    number = float(value) if value != "big" else value  # embeval.checks' wording, as for a spec's max_body_mb
    finite = value == "big" or math.isfinite(number)
    problem = f"must lie in (0, {MAX_BODY_MB}] MiB" if finite and value != "big" else \
        f"must be a finite number in (0, {MAX_BODY_MB}] MiB"
    assert _last_line(err) == f"embeval serve openvla: error: argument --max-body-mb: {problem}, got {number!r}"
    assert "max_body_bytes" not in err  # the flag, not the internal field, is named


def test_queue_size_zero_names_the_flag(capsys):
    rc, _, err = _serve(capsys, "openai", "--queue-size", "0")
    assert rc == 2 and _last_line(err) == "embeval serve openai: error: argument --queue-size: must be >= 1, got 0"


@pytest.mark.parametrize("host, why", [
    ("999.1.1.1", "is not an IPv4 address or host name that resolves here"),
    ("no-such-host.invalid", "is not an IPv4 address or host name that resolves here"),
    ("10.255.254.253", "is not an address of this machine"),
])
def test_a_bad_host_is_named_not_the_port(capsys, host, why):
    rc, out, err = _serve(capsys, "openvla", "--host", host, "--port", "18999")
    assert rc == 2
    assert out == ""  # no "serving ... POST http://999.1.1.1:..." before the bind failed
    line = _last_line(err)
    assert line.startswith(f"embeval: error: --host {host!r}" if "resolves" in why else f"embeval: error: --host {host} ")
    assert why in line and line.endswith("e.g. --host 127.0.0.1 (the default)")
    assert "--port" not in line and len(err.strip().splitlines()) == 1


def test_a_port_in_use_says_choose_another_port(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, out, err = _serve(capsys, "openai", "--port", port)
    assert rc == 2 and out == ""
    assert _last_line(err) == (f"embeval: error: port {port} on 127.0.0.1 is already in use; choose another --port "
                               "(or stop the server holding it)")


def test_library_limits_refuse_non_finite_and_raise_inflight_for_a_big_body(monkeypatch):
    from embeval.serving import openvla_server

    monkeypatch.setattr(openvla_server, "create_app", lambda subject, limits, **kw: limits)  # the limits it gets
    # a body limit above the in-flight default (512 MiB) raises the in-flight bound to hold one body
    limits = app_from_spec(POLICY, "openvla", max_body_mb=1000)
    assert limits.max_body_bytes == 1000 * MiB and limits.max_inflight_bytes == 1000 * MiB
    assert app_from_spec(POLICY, "openvla", max_body_mb=0.5).max_inflight_bytes == 512 * MiB
    for bad in (math.nan, math.inf, 0, -1, 2000, "x"):
        with pytest.raises(ConfigError, match=r"^--max-body-mb: must (lie in|be a finite number in) \(0, 1024\] MiB, got "):
            app_from_spec(POLICY, "openvla", max_body_mb=bad)
    for bad in (".inf", ".nan", "0", "true"):
        with pytest.raises(ConfigError, match=r"^serve\.limits\.max_body_mb: must (lie in|be a finite number in) \(0, 1024\] MiB"):
            ServerLimits.from_mapping({"max_body_mb": __import__("yaml").safe_load(bad)})
    with pytest.raises(ConfigError, match="server limit body_timeout_s: must be a finite number > 0, got inf"):
        ServerLimits(body_timeout_s=math.inf)
