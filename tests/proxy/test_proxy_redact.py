from ctxscope.proxy.redaction.redact import (
    REDACTED,
    extract_api_key,
    fingerprint,
    redact_headers,
    redact_query,
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
    from ctxscope.proxy.redaction import redact

    assert fingerprint("key-a", b"salt1") == a1  # remembered ...
    assert "key-a" not in repr(redact._fingerprints)  # ... without the key


def test_query_keys_are_redacted():
    assert redact_query("alt=sse&key=AIzaSecret") == f"alt=sse&key={REDACTED}".replace("[", "%5B").replace("]", "%5D")
    assert redact_query("alt=sse") == "alt=sse"
    assert redact_headers([("content-length", "12")]) == (("content-length", "12"),)


def test_repeated_headers_get_the_same_verdicts_and_no_secret_is_remembered():
    from ctxscope.proxy.redaction import redact

    headers = [
        ("User-Agent", "Anthropic/Python 0.40"),
        ("X-Trace", "sk-abcdefghijklmnopqrst"),
        ("X-Api-Key", "plain-secret"),
        ("Accept", "eyJ not a token"),
    ]
    first = redact_headers(headers)
    assert (
        redact_headers(headers)
        == first
        == (
            ("User-Agent", "Anthropic/Python 0.40"),
            ("X-Trace", REDACTED),
            ("X-Api-Key", REDACTED),
            ("Accept", "eyJ not a token"),
        )
    )
    assert "Anthropic/Python 0.40" in redact._harmless_values
    assert not {"sk-abcdefghijklmnopqrst", "plain-secret"} & redact._harmless_values


SECRET = "Zq8VvY2mK9pLx4TnR7wB1cD6fG3hJ5kM"  # 32 random-looking characters: upper, lower, digits


def test_credential_like_query_parameters_are_redacted_by_name_and_the_rest_kept_exactly():
    query = (
        "q=a%2Bb%20c&auth=hunter2&key%5B%5D=k1&key[]=k2&access_token=t&sig=abc&Signature=s&X-Amz-Signature=x"
        "&password=p&client_secret=c&code=oauth&alt=sse&page=2&empty=&flag"
    )
    out = redact_query(query)
    kept = dict(p.split("=", 1) if "=" in p else (p, None) for p in out.split("&"))
    for name in (
        "auth",
        "key%5B%5D",
        "key[]",
        "access_token",
        "sig",
        "Signature",
        "X-Amz-Signature",
        "password",
        "client_secret",
        "code",
    ):
        assert kept[name] == "%5Bredacted%5D", name
    for secret in ("hunter2", "k1", "k2", "oauth"):
        assert secret not in out
    assert out.startswith("q=a%2Bb%20c&") and out.endswith("&alt=sse&page=2&empty=&flag")


def test_secret_values_in_the_query_are_redacted_whatever_the_name():
    out = redact_query(f"x={SECRET}&y=ghp_abcdefghijklmnopqrstuvwxyz0123&AIzaSyA-1234567890abcdefghij&z=short")
    assert SECRET not in out and "ghp_" not in out and "AIza" not in out and out.endswith("&z=short")


def test_secret_shaped_values_in_unknown_headers_are_redacted():
    headers = [
        ("X-Custom", SECRET),
        ("X-Gh", "token ghp_abcdefghijklmnopqrstuvwxyz0123"),
        ("X-Pat", "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJ"),
        ("X-Gl", "glpat-abcdefghij0123456789"),
        ("X-Aws", "AKIAIOSFODNN7EXAMPLE"),
        ("X-Aws-Secret", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("X-Jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
        ("X-Slack", "xoxb-1234567890-abcdefghij"),
        ("X-HF", "hf_abcdefghijklmnopqrstuvwxyz"),
    ]
    out = redact_headers(headers)
    assert all(v == REDACTED for _, v in out), out


def test_ids_versions_and_media_types_are_kept():
    headers = [
        ("X-Claude-Code-Session-Id", "7a1c2d3e-4f56-4789-8abc-def012345678"),
        ("session_id", "Zq8VvY2mK9pLx4TnR7wB1cD6fG3hJ5kMzz"),  # a client's session id: shape alone is no secret here
        ("Content-Type", "multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW"),
        ("anthropic-beta", "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("X-Request-Trace", "0af7651916cd43dd8448eb211c80319c0af7651916cd43dd"),  # one case: a hash, not a key
        ("User-Agent", "Anthropic/Python 0.40.0"),
        ("X-Stainless-Package-Version", "1.2.3"),
    ]
    assert redact_headers(headers) == tuple(headers)


def test_the_key_pattern_masks_whole_tokens():
    from ctxscope.proxy.redaction.redact import _KEY_VALUE

    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    assert _KEY_VALUE.sub("*", f"a {jwt} b") == "a * b"
    assert _KEY_VALUE.sub("*", "use ghp_abcdefghijklmnopqrstuvwxyz0123 now") == "use * now"


def test_keys_in_array_form_still_fingerprint():
    assert extract_api_key([], "alt=sse&key%5B%5D=k5") == "k5"
    assert extract_api_key([], "key[]=k6") == "k6"
    assert extract_api_key([], "sig=notakey&access_token=k7") == "k7"
    assert extract_api_key([], "sig=notakey") is None
    assert fingerprint(extract_api_key([], "key[]=k6"), b"s") == fingerprint("k6", b"s")


def test_no_secret_is_remembered_by_the_caches():
    from ctxscope.proxy.redaction import redact

    redact_headers([("X-Custom", SECRET), ("X-Note", "harmless")])
    redact_query(f"auth=hunter2&x={SECRET}")
    remembered = repr(redact._harmless_values) + repr(redact._harmless_queries)
    assert SECRET not in remembered and "hunter2" not in remembered
    assert redact_query("beta=true") == "beta=true" and "beta=true" in redact._harmless_queries


def test_a_request_redacted_once_per_header_set_gives_what_each_step_gives_and_keeps_no_key():
    from ctxscope.proxy.redaction import redact
    from ctxscope.proxy.redaction.redact import redact_request

    key = "sk-proj-RequestCacheKey1234567890"
    headers = [
        ("User-Agent", "AsyncOpenAI/Python 1.50.0"),
        ("Authorization", f"Bearer {key}"),
        ("X-Stainless-Lang", "python"),
        ("Content-Type", "application/json"),
    ]
    query = "alt=sse&key=AIzaSyA-1234567890abcdefghij"
    for _ in range(2):  # worked out, then remembered: the same answer both times
        got = redact_request(list(headers), query, b"salt1")
        assert got.headers == redact_headers(headers)
        assert got.query == redact_query(query)
        assert got.key_fingerprint == fingerprint(extract_api_key(headers, query), b"salt1")
        assert got.user_agent == "AsyncOpenAI/Python 1.50.0"
    assert key not in repr(redact._requests) and "AIzaSyA" not in repr(redact._requests)
    other_key = redact_request([("Authorization", "Bearer sk-proj-AnotherKey1234567890ab")], query, b"salt1")
    assert other_key.key_fingerprint != got.key_fingerprint  # another key, another fingerprint
    assert redact_request(headers, query, b"salt2").key_fingerprint != got.key_fingerprint  # another salt too
    assert redact_request([("Content-Type", "x")], "", b"salt1").user_agent is None
