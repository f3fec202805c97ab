"""Prices from genai-prices under the user's override file: figures computed by hand from the
library's published rates (USD per million tokens), dated rates, tiers, and unknown models."""

import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from ctxscope.inspector.analyses.cache.loss import priced_loss
from ctxscope.inspector.analyses.prices import SIMULATOR_FREE, Price, Unpriced, load_prices, prices_source


def _usage(inp, read, write, out):
    return {"input": inp, "cache_read": read, "cache_write": write, "output": out}


def test_an_anthropic_call_with_cache_reads_and_writes_at_the_published_rates():
    # claude-sonnet-4-5 below 200k tokens: input $3, output $15, read $0.30, 5m write $3.75, 1h write $6.
    t = load_prices()
    p = t.lookup("claude-sonnet-4-5-20250929")
    assert (p.input, p.output, p.cache_read, p.cache_write, p.cache_write_1h) == (3.0, 15.0, 0.3, 3.75, 6.0)
    assert p.write_rate("1h") == 6.0 and p.write_rate("5m") == 3.75 and p.source == "genai-prices"
    # 10,000 prompt tokens: 2,000 uncached, 6,000 read, 2,000 written; 500 out.
    cost = t.cost("claude-sonnet-4-5-20250929", _usage(10_000, 6_000, 2_000, 500))
    assert cost == pytest.approx((2_000 * 3 + 6_000 * 0.3 + 2_000 * 3.75 + 500 * 15) / 1e6) == pytest.approx(0.0228)


def test_a_long_prompt_is_priced_at_its_tier_for_every_token():
    # Above 200k prompt tokens Anthropic bills every token of the call at the long-context rates.
    t = load_prices()
    cost = t.cost("claude-sonnet-4-5", _usage(250_000, 150_000, 50_000, 1_000))
    assert cost == pytest.approx((50_000 * 6 + 150_000 * 0.6 + 50_000 * 7.5 + 1_000 * 22.5) / 1e6) == 0.7875
    assert t.lookup("claude-sonnet-4-5", prompt_tokens=200_000).input == 3.0  # the tier starts above 200k


def test_an_openai_call_pays_no_write_surcharge():
    # gpt-4.1: input $2, output $8, cached input $0.50; OpenAI has no write price (writes are input).
    t = load_prices()
    p = t.lookup("gpt-4.1-2025-04-14")
    assert (p.input, p.output, p.cache_read, p.cache_write, p.write_rate("1h")) == (2.0, 8.0, 0.5, 2.0, 2.0)
    assert t.cost("openai/gpt-4.1", _usage(10_000, 6_000, 0, 500)) == pytest.approx(
        (4_000 * 2 + 6_000 * 0.5 + 500 * 8) / 1e6
    )
    assert t.lookup("gpt-5.5").input == 5.0 and t.lookup("gpt-5").input == 1.25  # "gpt-5" does not take gpt-5.5


def test_a_gemini_call_gets_a_price():
    # gemini-2.5-flash: input $0.30, output $2.50, cached input $0.03.
    t = load_prices()
    assert t.cost("gemini-2.5-flash", _usage(10_000, 6_000, None, 500)) == pytest.approx(
        (4_000 * 0.3 + 6_000 * 0.03 + 500 * 2.5) / 1e6
    )
    assert t.lookup("gemini-2.5-pro").cache_read == 0.125


def test_a_call_is_priced_at_the_rates_of_its_date():
    # o3 cost $10 per million input tokens until 2025-06-10, $2 from then on.
    t = load_prices()
    assert t.lookup("o3", datetime(2025, 6, 1, tzinfo=UTC)).input == 10.0
    assert t.lookup("o3", "2025-07-01T09:00:00Z").input == 2.0
    assert t.lookup("o3", datetime(2025, 6, 9, 23, 59, tzinfo=UTC).timestamp()).input == 10.0


def test_an_unknown_model_is_unpriced_and_says_why():
    t = load_prices()
    got = t.quote("acme-reasoner-9000")
    assert isinstance(got, Unpriced) and got.reason == f"'acme-reasoner-9000' is not in {prices_source()}"
    assert t.lookup("acme-reasoner-9000") is None  # no mid-tier guess
    assert t.quote(None) == Unpriced("the request names no model")
    assert t.cost("acme-reasoner-9000", _usage(100, 0, 0, 10)) == got
    assert prices_source().startswith("genai-prices 0.")


def test_the_simulator_is_never_priced_whatever_model_it_names():
    t = load_prices()
    assert t.quote("claude-sonnet-4-5", provider="u/sim") == Unpriced(SIMULATOR_FREE)
    assert t.cost("claude-sonnet-4-5", _usage(100, 0, 0, 10), provider="u/sim") == Unpriced(SIMULATOR_FREE)


def test_override_file(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "my-model": {"input": 2, "output": 8},
                "claude-opus-4-6": {"input": 4, "cache_write": 5, "cache_read": 0.4, "output": 20},
            }
        )
    )
    t = load_prices(path)
    mine = t.lookup("vendor/my-model-v2")
    assert (mine.input, mine.output, mine.cache_read, mine.cache_write, mine.source) == (2, 8, 0.2, 2, "override")
    assert t.lookup("claude-opus-4-6").input == 4  # the user's row wins over the library's
    assert t.lookup("claude-sonnet-4-5").input == 3.0  # the library's kept
    assert t.lookup("unknown") is None


def test_a_default_entry_is_the_users_own_guess_and_says_so(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"default": {"input": 1}}))
    t = load_prices(path)
    assert t.lookup("unknown").input == 1 and t.lookup("unknown").source == "default"
    assert t.lookup("claude-haiku-4-5").input == 1.0 and t.lookup("claude-haiku-4-5").source == "genai-prices"


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


def test_pricing_opens_no_connection():
    """The library's bundled snapshot only: with every socket refused, a fresh process still prices."""
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse; socket.getaddrinfo = refuse\n"
        "from ctxscope.inspector.analyses.prices import load_prices\n"
        "t = load_prices()\n"
        "print(t.lookup('gemini-2.5-pro').input, t.lookup('claude-opus-4-7').input, t.lookup('gpt-5').input)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["1.25", "5.0", "1.25"], out.stderr


def test_the_loss_is_priced_at_what_was_paid_minus_the_read_rate():
    # 10,000 tokens lost, 8,000 of them written back (at $3.75), 2,000 paid as plain input ($3);
    # a read would have cost $0.30 each.
    p = load_prices().lookup("claude-sonnet-4-5")
    assert isinstance(p, Price)
    loss = priced_loss(10_000, p, written=8_000, ttl="5m")
    assert loss.usd == pytest.approx((8_000 * (3.75 - 0.3) + 2_000 * (3 - 0.3)) / 1e6) == pytest.approx(0.033)
    assert priced_loss(10_000, p, written=10_000, ttl="1h").usd == pytest.approx(10_000 * (6 - 0.3) / 1e6)
    unpriced = priced_loss(500, Unpriced(SIMULATOR_FREE), written=0, ttl=None)
    assert (unpriced.tokens, unpriced.usd, unpriced.unpriced) == (500, None, SIMULATOR_FREE)
