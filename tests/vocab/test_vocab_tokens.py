"""The o200k encoder: the bundled ranks are tiktoken's own (hash-pinned), and counting never needs a network."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import textwrap

import tiktoken_ext.openai_public as openai_public

from ctxscope.vocab import tokens

SAMPLES = {
    "hello world": 2,
    "上下文管理是智能体运行时的核心：压缩、提醒和守护。": 19,
    '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": true}': 31,
}


def test_bundled_ranks_match_the_hash_tiktoken_publishes(monkeypatch):
    seen = {}

    def fake_load(url, expected_hash=None):
        seen["hash"] = expected_hash
        return tokens.load_ranks()

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_load)
    params = openai_public.o200k_base()
    assert seen["hash"] == tokens.O200K_SHA256 == "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    assert params["pat_str"] == tokens.O200K_PAT
    assert params["special_tokens"] == tokens.O200K_SPECIAL


def test_known_counts_for_english_chinese_and_json(monkeypatch):
    import tiktoken

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda url, expected_hash=None: tokens.load_ranks())
    reference = tiktoken.Encoding(**openai_public.o200k_base())  # tiktoken's own constructor, our file
    assert tokens.encoding().encode_ordinary("hello world") == [24912, 2375]
    assert tokens.encoding().n_vocab == 200019
    for text, expected in SAMPLES.items():
        assert tokens.count_tokens(text) == expected == len(reference.encode_ordinary(text)), text


def test_special_token_text_counts_as_plain_text():
    assert tokens.count_tokens("<|endoftext|>") > 1


def test_long_text_is_counted_exactly_in_windows():
    line = 'def f(x):\n    return x * 2  # 上下文 {"k": [1, 2, 3]}\n'
    text = line * 20000  # ~1 MB, counted in windows cut after newlines
    assert len(text) > 4 * 65536
    assert tokens.count_tokens(text) == len(tokens.encoding().encode_ordinary(text))


def test_counting_works_with_no_network_and_writes_no_cache(tmp_path):
    script = textwrap.dedent("""
        import socket
        def refuse(*a, **k):
            raise OSError("network disabled in this test")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        from ctxscope.vocab.tokens import count_tokens
        print(count_tokens("hello world"))
    """)
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    env = dict(
        os.environ, TIKTOKEN_CACHE_DIR=str(cache), HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"
    assert list(cache.iterdir()) == []


def test_the_ranks_are_read_as_tiktoken_parses_its_file():
    """load_ranks takes each token's position as its rank; tiktoken parses each line's rank."""
    reference = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in tokens.ranks_file_bytes().splitlines() if line)
    }
    assert tokens.load_ranks() == reference
    assert len(reference) == 199_998
