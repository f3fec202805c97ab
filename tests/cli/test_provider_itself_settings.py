"""The `[provider_itself]` table of the daemon's config: which upstreams leave known per-request
metadata out of their cache key, checked as it is read and handed to the analysis by upstream URL."""

from __future__ import annotations

import pytest

from ctxscope.inspector.analyses.prompt_metadata import KNOWN_BLOCKS, ProviderItself
from ctxscope.settings import build_config

BILLING = KNOWN_BLOCKS[0]


def config(tmp_path, text: str):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return build_config(config_file=path, host=None, port=None, db=None, upstream_options=(), allow_remote=False)


def test_an_upstream_named_as_the_provider_itself_reaches_the_analysis_by_its_url(tmp_path):
    cfg = config(
        tmp_path, '[upstreams]\ngw = "http://127.0.0.1:9/anthropic/"\n[provider_itself]\ngw = true\nanthropic = false\n'
    )
    itself = ProviderItself.from_text(cfg.provider_itself_text())
    assert itself.ignores(BILLING, "http://127.0.0.1:9/anthropic")
    assert not itself.ignores(BILLING, "https://api.anthropic.com")
    assert ProviderItself().ignores(BILLING, "https://api.anthropic.com")  # the default
    assert not ProviderItself().ignores(BILLING, "https://api.minimax.io/anthropic")
    assert ProviderItself.from_text(config(tmp_path, "[provider_itself]\nsim = true\n").provider_itself_text()).ignores(
        BILLING, "sim"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[provider_itself]\nanthropic = "yes"\n', "must be a table of UPSTREAM = true or false"),
        ("provider_itself = 3\n", "must be a table of UPSTREAM = true or false"),
        ("[provider_itself]\nnowhere = true\n", "names no configured upstream: nowhere"),
    ],
)
def test_a_bad_table_is_a_one_line_error(tmp_path, text, says):
    with pytest.raises(ValueError, match=says):
        config(tmp_path, text)


def test_the_writer_refuses_bad_overrides_text():
    with pytest.raises(ValueError):
        ProviderItself.from_text('{"x": "yes"}')
