from ctxscope.proxy.redact import (
    REDACTED, extract_api_key, fingerprint, is_secret_header, redact_headers, redact_query,
)


def test_known_and_lookalike_secret_headers_are_redacted():
    headers = [
        ("Authorization", "Bearer sk-proj-abcdefghijklmnop"),
        ("x-api-key", "sk-ant-api03-xyz"),
        ("api-key", "azure-key"),
        ("x-goog-api-key", "AIzaSyA-1234567890abcdefghij"),
        ("Cookie", "a=b"),
        ("X-Custom-Token", "whatever"),
        ("X-Note", "uses sk-abcdefghijklmnopqrst inside"),
        ("anthropic-version", "2023-06-01"),
        ("X-Claude-Code-Session-Id", "1234"),
        ("Content-Type", "application/json"),
    ]
    out = dict(redact_headers(headers))
    for name in ("Authorization", "x-api-key", "api-key", "x-goog-api-key", "Cookie", "X-Custom-Token", "X-Note"):
        assert out[name] == REDACTED, name
    assert out["anthropic-version"] == "2023-06-01"
    assert out["X-Claude-Code-Session-Id"] == "1234"
    assert out["Content-Type"] == "application/json"


def test_extract_key_from_each_style():
    assert extract_api_key([("x-api-key", "k1")]) == "k1"
    assert extract_api_key([("Authorization", "Bearer k2")]) == "k2"
    assert extract_api_key([("api-key", "k3")]) == "k3"
    assert extract_api_key([], "alt=sse&key=k4") == "k4"
    assert extract_api_key([("Content-Type", "x")]) is None


def test_fingerprint_is_salted_stable_and_distinct():
    a1 = fingerprint("key-a", b"salt1")
    assert a1 == fingerprint("key-a", b"salt1")
    assert a1 != fingerprint("key-b", b"salt1")
    assert a1 != fingerprint("key-a", b"salt2")
    assert "key-a" not in a1 and len(a1) == 16
    assert fingerprint(None, b"s") is None
    from ctxscope.proxy import redact

    assert fingerprint("key-a", b"salt1") == a1  # remembered ...
    assert "key-a" not in repr(redact._fingerprints)  # ... without the key


def test_query_keys_are_redacted():
    assert redact_query("alt=sse&key=AIzaSecret") == f"alt=sse&key={REDACTED}".replace("[", "%5B").replace("]", "%5D")
    assert redact_query("alt=sse") == "alt=sse"
    assert not is_secret_header("content-length", "12")


def test_repeated_headers_get_the_same_verdicts_and_no_secret_is_remembered():
    from ctxscope.proxy import redact

    headers = [("User-Agent", "Anthropic/Python 0.40"), ("X-Trace", "sk-abcdefghijklmnopqrst"),
               ("X-Api-Key", "plain-secret"), ("Accept", "eyJ not a token")]
    first = redact_headers(headers)
    assert redact_headers(headers) == first == (
        ("User-Agent", "Anthropic/Python 0.40"), ("X-Trace", REDACTED), ("X-Api-Key", REDACTED),
        ("Accept", "eyJ not a token"),
    )
    assert "Anthropic/Python 0.40" in redact._harmless_values
    assert not {"sk-abcdefghijklmnopqrst", "plain-secret"} & redact._harmless_values
