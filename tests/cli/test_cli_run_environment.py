"""What `ctxscope run` gives the command: the labelled proxy URL every CONNECT client sends back as
Proxy-Authorization, Codex's `openai_base_url` as a `-c` override (no user file touched), and with
--sim the simulator's routes and dummy keys that never replace a key that is set."""

from __future__ import annotations

import base64
import json
from urllib.parse import unquote, urlsplit

from ctxscope.proxy.sockets.connect import BadLabel, connect_label
from ctxscope.run_commands import client_arguments, labelled_proxy_url, launch_environment

URL = "http://127.0.0.1:8787"


def test_the_proxy_url_carries_the_label_that_the_daemon_reads_back():
    proxy = labelled_proxy_url(URL, "fix tests/é%")
    parts = urlsplit(proxy)
    user = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    head = (
        b"CONNECT api.openai.com:443 HTTP/1.1\r\nProxy-Authorization: Basic "
        + base64.b64encode(user.encode())
        + b"\r\n\r\n"
    )
    assert parts.password and connect_label(head) == "fix tests/é%"
    assert connect_label(b"CONNECT a:443 HTTP/1.1\r\n\r\n") is None
    assert connect_label(b"CONNECT a:443 HTTP/1.1\r\nProxy-Authorization: Bearer x\r\n\r\n") is None


def test_two_proxy_authorizations_are_refused():
    head = b"CONNECT a:443 HTTP/1.1\r\nProxy-Authorization: Basic YTo=\r\nproxy-authorization: Basic Yjo=\r\n\r\n"
    try:
        connect_label(head)
    except BadLabel:
        return
    raise AssertionError("two Proxy-Authorization headers were accepted")


def test_codex_gets_openai_base_url_on_its_command_line_only():
    argv = client_arguments(["/usr/local/bin/codex", "exec", "hi"], URL, "job")
    assert argv[:3] == ["/usr/local/bin/codex", "-c", "openai_base_url=" + json.dumps(f"{URL}/s/job/openai/v1")]
    assert argv[3:] == ["exec", "hi"]
    assert client_arguments(["codex"], URL, "job", sim=True)[2].endswith('/s/job/u/sim/v1"')
    assert client_arguments(["python", "codex"], URL, "job") == ["python", "codex"]


def test_sim_sets_dummy_keys_only_where_none_is_set_and_the_proxy_both_ways():
    env = launch_environment(
        {"OPENAI_API_KEY": "sk-mine", "https_proxy": "http://corp:3128"},
        URL,
        "j",
        {"HTTPS_PROXY": URL, "NO_PROXY": "127.0.0.1"},
        sim=True,
    )
    assert env["OPENAI_API_KEY"] == "sk-mine" and env["ANTHROPIC_API_KEY"] and env["GEMINI_API_KEY"]
    assert env["OPENAI_BASE_URL"] == f"{URL}/s/j/u/sim/v1" and env["ANTHROPIC_BASE_URL"] == f"{URL}/s/j/u/sim"
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://j:ctxscope@127.0.0.1:8787"
    assert env["no_proxy"] == env["NO_PROXY"] == "127.0.0.1"
    plain = launch_environment({}, URL, "j", {"HTTPS_PROXY": URL, "NO_PROXY": "x"})
    assert "OPENAI_API_KEY" not in plain and plain["OPENAI_BASE_URL"] == f"{URL}/s/j/openai/v1"


def test_a_label_that_cannot_travel_as_a_proxy_user_is_refused_before_the_command_runs(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from ctxscope.main import cli

    monkeypatch.setenv("CTXSCOPE_HOME", str(tmp_path / "home"))
    done = CliRunner().invoke(cli, ["run", "--port", "1", "--label", "a:b", "--", "touch", str(tmp_path / "ran")])
    assert done.exit_code != 0 and "without ':'" in done.output
    assert not (tmp_path / "ran").exists()
