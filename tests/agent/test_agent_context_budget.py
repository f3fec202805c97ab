"""Budget lines (the worked examples are the contract), the output floor, and the settings."""

from __future__ import annotations

import pytest

from ctxscope.agent.core.budget import (
    CHECKPOINT_OUTPUT_CAP,
    ContextSettings,
    budget_lines,
    byte_limit,
    checkpoint_output_limit,
    output_floor,
)


@pytest.mark.parametrize(
    "window,output,limit,trigger",
    [
        (128_000, 16_000, 109_952, 96_000),
        (200_000, 32_000, 165_952, 165_952),
    ],
)
def test_worked_examples(window, output, limit, trigger):
    lines = budget_lines(window, output)
    assert (lines.provider_input_limit, lines.automatic_trigger_at) == (limit, trigger)
    assert lines.effective_output == output  # both windows hold the full configured output


def test_small_window_reserves_the_output_floor_not_the_configured_output():
    # 40000 - 30000 - 2048 < 16384: the full output does not fit, so only the floor is reserved
    lines = budget_lines(40_000, 30_000)
    assert lines.effective_output == output_floor(30_000) == 4096
    assert lines.provider_input_limit == min(38_000, 40_000 - 16_384, 40_000 - 4096 - 2048) == 23_616
    assert lines.automatic_trigger_at == min(23_616, 40_000 - 10_000)


def test_output_floor_never_exceeds_the_configured_output_and_lines_stay_positive():
    assert output_floor(1000) == 1000 and output_floor(100_000) == 4096
    tiny = budget_lines(1000, 500)
    assert tiny.provider_input_limit == 1 and tiny.automatic_trigger_at == 1


def test_checkpoint_output_limit_is_80_percent_of_the_reserve_or_the_model_limit():
    assert CHECKPOINT_OUTPUT_CAP == 13_107
    assert checkpoint_output_limit(32_000) == 13_107 and checkpoint_output_limit(4096) == 4096


def test_byte_limits_are_configurable_per_provider_or_api():
    assert byte_limit("anthropic", "anthropic") == 32_000_000
    assert byte_limit("sim", "openai-chat", {"sim": 1000}) == 1000
    assert byte_limit("sim", "openai-chat", {"openai-chat": 2000}) == 2000


def test_settings_accept_the_documented_keys_and_reject_typos():
    s = ContextSettings.from_mapping({"maxInlineKiB": 8, "keepRecentRounds": 2, "checkpoint_mode": "separate"})
    assert (s.max_inline_kib, s.keep_recent_rounds, s.checkpoint_mode, s.watermark_kib) == (8, 2, "separate", 256)
    assert ContextSettings() == ContextSettings(64, 32, 256, 256, 2, 5, True)
    with pytest.raises(ValueError, match="unknown"):
        ContextSettings.from_mapping({"maxInlineKib": 8})
    with pytest.raises(ValueError, match="checkpoint_mode"):
        ContextSettings.from_mapping({"checkpoint_mode": "cheap"})
    # a shared settings table holds other builtins' keys: not strict
    assert ContextSettings.from_mapping({"disableSystemReminderModels": ["x"]}, strict=False) == ContextSettings()
