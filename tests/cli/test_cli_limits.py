"""Setting the abuse limits: the config file's [limits] table and `serve --limit KEY=VALUE`, with
clear errors for unknown keys and bad values."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ctxscope.main import cli
from ctxscope.proxy.defence.limits import KEYS, Limits, parse_limit_option
from ctxscope.settings import build_config, read_config_file


def _build(tmp_path, toml: str | None = None, limits: tuple[str, ...] = ()):
    path = None
    if toml is not None:
        path = tmp_path / "c.toml"
        path.write_text(toml)
    return build_config(
        config_file=path, host=None, port=None, db=None, upstream_options=(), allow_remote=False, limit_options=limits
    )


def test_defaults():
    assert Limits() == Limits(
        header_timeout=15,
        body_timeout=30,
        keepalive_timeout=75,
        max_connections=512,
        max_body_bytes=256 * 2**20,
        max_decoded_bytes=128 * 2**20,
        shutdown_grace=60,
    )
    assert {
        "header_timeout",
        "body_timeout",
        "keepalive_timeout",
        "max_connections",
        "max_body_bytes",
        "max_decoded_bytes",
    } <= set(KEYS)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("header_timeout=0.5", ("header_timeout", 0.5)),
        ("body-timeout=2", ("body_timeout", 2.0)),
        ("max_connections=64", ("max_connections", 64)),
        ("max_body_bytes=256MiB", ("max_body_bytes", 256 * 2**20)),
        ("max_body_bytes=64k", ("max_body_bytes", 64 * 2**10)),
        ("max_decoded_bytes = 1.5GiB", ("max_decoded_bytes", 3 * 2**29)),
        ("max_body_bytes=1000000", ("max_body_bytes", 1000000)),
    ],
)
def test_limit_options_parse(text, expected):
    assert parse_limit_option(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("bogus=1", "unknown limit 'bogus'; known limits: header_timeout"),
        ("header_timeout", "expected KEY=VALUE"),
        ("header_timeout=", "expected KEY=VALUE"),
        ("header_timeout=soon", "must be a number of seconds"),
        ("header_timeout=0", "positive"),
        ("header_timeout=-3", "positive"),
        ("header_timeout=inf", "positive"),
        ("header_timeout=nan", "positive"),
        ("max_connections=1.5", "positive whole number"),
        ("max_connections=many", "positive whole number"),
        ("max_body_bytes=0", "positive whole number"),
        ("max_body_bytes=12 parsecs", "positive whole number"),
    ],
)
def test_bad_limit_options_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_limit_option(text)


def test_config_file_limits_and_the_command_line_over_them(tmp_path):
    toml = '[limits]\nheader_timeout = 5\nmax_body_bytes = "1MiB"\nmax_connections = 10\n'
    cfg = _build(tmp_path, toml, ("max_connections=20",))
    assert cfg.limits == Limits(header_timeout=5, max_body_bytes=2**20, max_connections=20)
    assert _build(tmp_path).limits == Limits()


@pytest.mark.parametrize(
    "toml, message",
    [
        ("[limits]\nheader_timout = 5\n", "unknown limit 'header_timout'"),
        ("[limits]\nmax_connections = true\n", "must be a number"),
        ("[limits]\nbody_timeout = [1]\n", "number of seconds"),
        ("limits = 3\n", "must be a table"),
    ],
)
def test_bad_config_file_limits_name_the_file_and_the_key(tmp_path, toml, message):
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ValueError, match=message) as info:
        read_config_file(path)
    assert str(path) in str(info.value)


def test_serve_refuses_a_bad_limit_before_starting(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXSCOPE_HOME", str(tmp_path))
    result = CliRunner().invoke(cli, ["serve", "--port", "0", "--limit", "header_timeout=soon"])
    assert result.exit_code != 0 and "limit header_timeout must be a number of seconds" in result.output
    result = CliRunner().invoke(cli, ["serve", "--port", "0", "--limit", "nope=1"])
    assert result.exit_code != 0 and "unknown limit 'nope'" in result.output and "max_body_bytes" in result.output
    assert not (tmp_path / "captures.db").exists()


def test_serve_help_lists_the_limits():
    result = CliRunner().invoke(cli, ["serve", "--help"])
    assert result.exit_code == 0
    for key in (
        "--limit",
        "header_timeout",
        "body_timeout",
        "keepalive_timeout",
        "max_connections",
        "max_body_bytes",
        "max_decoded_bytes",
    ):
        assert key in result.output
