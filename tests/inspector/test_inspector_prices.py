import json

import pytest

from ctxscope.inspector.analyses.prices import BUILTIN, PRICES_AS_OF, load_prices


def test_builtin_lookup_by_name_parts():
    t = load_prices()
    assert PRICES_AS_OF.startswith("2026-")
    assert t.lookup("claude-sonnet-4-5-20250929") is BUILTIN["claude-sonnet-4"]
    assert t.lookup("us.anthropic.claude-opus-4-6-v1:0") is BUILTIN["claude-opus-4-6"]
    assert t.lookup("claude-opus-4-20250514") is BUILTIN["claude-opus-4"]
    assert t.lookup("openai/gpt-4.1-mini") is BUILTIN["gpt-4.1-mini"]
    assert t.lookup("gpt-5-2026-04-01") is BUILTIN["gpt-5"]
    assert t.lookup("gpt-5.5").source == "default"  # "gpt-5" must not price a different model
    assert t.lookup(None).source == "default"


def test_anthropic_cache_multipliers():
    p = BUILTIN["claude-opus-4-6"]
    assert (p.input, p.cache_write, p.cache_write_1h, p.cache_read, p.output) == (5.0, 6.25, 10.0, 0.5, 25.0)
    assert p.write_rate("1h") == 10.0 and p.write_rate("5m") == 6.25 and p.write_rate(None) == 6.25
    assert BUILTIN["gpt-4.1"].write_rate("1h") == 2.0  # no 1h tier: the plain write rate


def test_override_file(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "my-model": {"input": 2, "output": 8},
                "claude-opus-4-6": {"input": 4, "cache_write": 5, "cache_read": 0.4, "output": 20},
                "default": {"input": 1},
            }
        )
    )
    t = load_prices(path)
    mine = t.lookup("vendor/my-model-v2")
    assert (mine.input, mine.output, mine.cache_read, mine.cache_write, mine.source) == (2, 8, 0.2, 2, "override")
    assert t.lookup("claude-opus-4-6").input == 4
    assert t.lookup("claude-sonnet-4-5").input == 3.0  # built-ins kept
    assert t.lookup("unknown").input == 1 and t.lookup("unknown").source == "override"


@pytest.mark.parametrize(
    "content",
    [
        '["not", "an", "object"]',
        '{"m": 3}',
        '{"m": {"output": 1}}',
        '{"m": {"input": "cheap"}}',
        '{"m": {"input": 1, "x": 2}}',
    ],
)
def test_bad_override_files_raise(tmp_path, content):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ValueError):
        load_prices(path)
