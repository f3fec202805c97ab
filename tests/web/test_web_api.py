"""The UI's JSON API, page and security headers on a real daemon, fed by the real SDKs."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request

import pytest

from ctxscope.inspector.store.queries import get_request_raw, get_response_raw, open_db

from support.web_fixtures import KEY, anthropic_client, openai_client, start_web_daemon

SYSTEM = "You are a careful coding assistant. " * 600


@pytest.fixture
def web(tmp_path):
    d = start_web_daemon(tmp_path)
    yield d
    d.stop()


def _req(web, path, *, method="GET", headers=None):
    req = urllib.request.Request(web.url + path, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _json(web, path, **kw):
    status, _headers, body = _req(web, path, **kw)
    return status, json.loads(body)


def _token(web) -> str:
    _, _, html = _req(web, "/")
    return re.search(rb'name="ctxscope-token" content="([0-9a-f]+)"', html).group(1).decode()


def _conversation(web, session, turns=3, system=SYSTEM, model="claude-sonnet-4-6"):
    client = anthropic_client(web.url, session)
    msgs = [{"role": "user", "content": "start"}]
    for i in range(turns):
        r = client.messages.create(
            model=model,
            max_tokens=50,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            messages=msgs,
        )
        msgs = msgs + [{"role": "assistant", "content": r.content[0].text}, {"role": "user", "content": f"turn {i}"}]
    return msgs


def test_page_and_api_carry_strict_security_headers(web):
    status, headers, html = _req(web, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    csp = headers["Content-Security-Policy"]
    for part in (
        "default-src 'self'",
        "script-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
        "require-trusted-types-for 'script'",
    ):
        assert part in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["X-Frame-Options"] == "DENY"
    assert b"<script>" not in html and b'src="/_ctxscope/static/app.js"' in html  # no inline script
    status, headers, body = _req(web, "/_ctxscope/static/app.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert headers["Content-Security-Policy"] == csp and b"innerHTML" not in body
    assert _req(web, "/_ctxscope/static/nope.js")[0] == 404
    assert _req(web, "/_ctxscope/static/..%2froutes.py")[0] == 404
    status, headers, _ = _req(web, "/_ctxscope/api/sessions")
    assert status == 200 and headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"


def test_no_static_file_assigns_html():
    from ctxscope.web.routes import STATIC_DIR

    for path in STATIC_DIR.glob("*.js"):
        text = path.read_text()
        for sink in (
            ".innerHTML",
            ".outerHTML",
            ".insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "srcdoc",
        ):
            assert sink not in text, f"{path.name} uses {sink}"


def test_foreign_host_header_is_refused(web):
    """A DNS-rebinding page reaches us under its own host name: it must not read captures."""
    assert _req(web, "/_ctxscope/api/sessions", headers={"Host": "evil.example"})[0] == 421
    assert _req(web, "/", headers={"Host": "evil.example:80"})[0] == 421
    assert _req(web, "/_ctxscope/api/sessions", headers={"Host": "localhost"})[0] == 200


@pytest.mark.slow
def test_sessions_aggregate_real_traffic(web):
    _conversation(web, "alpha", turns=3)
    openai_client(web.url, "beta").chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    web.wait_for_calls(4)
    status, data = _json(web, "/_ctxscope/api/sessions")
    assert status == 200
    by = {s["session"]: s for s in data["sessions"]}
    alpha, beta = by["alpha"], by["beta"]
    assert alpha["calls"] == 3 and alpha["models"] == ["claude-sonnet-4-6"]
    assert alpha["clients"][0].startswith("anthropic-python ") and beta["clients"][0].startswith("openai-python ")
    assert alpha["usage"]["cache_read"] > 0 and alpha["cached_share"]["ratio"] > 0.5
    assert alpha["hit_rate"] == {"hits": 2, "eligible": 2, "ratio": 1.0}
    assert alpha["breaks"] == 0 and alpha["cost_usd"] > 0 and not alpha["cost_estimated"]
    assert [t["calls"] for t in alpha["threads"]] == [3]
    assert data["sessions"][0]["session"] == "beta"  # most recent first


def test_sessions_made_by_ctxscope_are_listed_only_when_asked_for(web):
    _conversation(web, "alpha", turns=1)
    _conversation(web, "replay:0123456789abcdef", turns=1)  # a replay's session name: a purpose's
    web.wait_for_calls(2)
    listed = _json(web, "/_ctxscope/api/sessions")[1]["sessions"]
    assert [(s["session"], s["purpose"]) for s in listed] == [("alpha", None)]
    every = _json(web, "/_ctxscope/api/sessions?all=1")[1]["sessions"]
    assert [(s["session"], s["purpose"]) for s in every] == [("replay:0123456789abcdef", "replay"), ("alpha", None)]


@pytest.mark.slow
def test_session_timeline_pages_series_and_filters(web):
    _conversation(web, "long", turns=7)
    web.wait_for_calls(7)
    status, view = _json(web, "/_ctxscope/api/session?s=long&limit=3")
    assert status == 200 and view["total"] == 7 and view["offset"] == 6  # opens at the latest page
    assert [c["seq"] for c in view["calls"]] == [7]
    assert view["series"]["seq"] == list(range(1, 8)) and len(view["series"]["ctx"]) == 7
    assert view["series"]["ctx"] == sorted(view["series"]["ctx"])  # the context only grows
    assert view["analysis"] and view["summary"]["calls"] == 7
    first = _json(web, "/_ctxscope/api/session?s=long&limit=3&offset=0")[1]
    assert [c["seq"] for c in first["calls"]] == [1, 2, 3]
    c = first["calls"][1]
    assert c["relation"] == "APPEND_ONLY" and c["cache"]["verdict"] == "hit"
    assert c["tokens_by_category"]["system"] > 3000 and isinstance(c["markers"], list)
    only = _json(web, "/_ctxscope/api/session?s=long&relation=EPOCH_START")[1]
    assert only["total"] == 1 and only["all"] == 7 and only["calls"][0]["epoch_reason"] == "session_start"
    assert _json(web, "/_ctxscope/api/session?s=long&q=zzz-nothing")[1]["total"] == 0
    assert _json(web, "/_ctxscope/api/session?s=nope")[0] == 404
    assert _json(web, "/_ctxscope/api/session?s=long&offset=x")[0] == 400


def test_call_detail_parses_request_and_response_and_never_shows_the_key(web):
    _conversation(web, "detail", turns=2)
    rows = web.wait_for_calls(2)
    status, d = _json(web, f"/_ctxscope/api/call?id={rows[1]['id']}")
    assert status == 200
    assert d["request"]["messages"][0]["content"] == "start"  # the outline: short texts whole, long ones cut
    assert d["request"]["system"][0]["text"] == SYSTEM[:300]
    assert d["request_outline"]["texts"]["/system/0/text"]["chars"] == len(SYSTEM)
    _, node = _json(web, f"/_ctxscope/api/node?id={rows[1]['id']}&kind=request&ptr=/system/0/text")
    assert node["text"] == SYSTEM and node["next_offset"] is None
    assert d["response"]["content"][0]["type"] == "text" and d["diff_base"] == rows[0]["id"]
    assert d["navigation"] == {"previous": rows[0]["id"], "next": None}
    call = d["call"]
    assert "request_blob" not in call and call["client_name"].startswith("anthropic-python")
    assert call["usage"]["cache_read"] > 0
    headers = {k.lower(): v for k, v in call["request_headers"]}
    assert KEY not in json.dumps(d) and (headers.get("x-api-key") or headers["authorization"]) == "[redacted]"
    _, _, wire = _req(web, f"/_ctxscope/api/raw.bin?id={rows[1]['id']}&kind=request&form=wire")
    assert KEY.encode() not in wire
    assert _json(web, "/_ctxscope/api/call?id=nope")[0] == 404


@pytest.mark.slow
def test_raw_ranges_reassemble_the_exact_body_without_splitting_characters(web):
    text = "héllo wörld — 你好 " * 4000  # multi-byte characters across every range boundary
    openai_client(web.url, "raw").chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": text}])
    [row] = web.wait_for_calls(1)
    db = open_db(web.db_path)
    exact = get_request_raw(db, row["id"])
    response = get_response_raw(db, row["id"])
    db.close()
    parts, offset = [], 0
    while offset is not None:
        status, r = _json(web, f"/_ctxscope/api/raw?id={row['id']}&kind=request&offset={offset}&length=1000")
        assert status == 200 and not r["binary"] and r["total"] == len(exact)
        parts.append(r["text"])
        offset = r["next_offset"]
    assert "".join(parts).encode() == exact and len(parts) > 50
    status, headers, body = _req(web, f"/_ctxscope/api/raw.bin?id={row['id']}&kind=response&form=wire&exact=1")
    assert status == 200 and body == response and "attachment" in headers["Content-Disposition"]
    assert _json(web, f"/_ctxscope/api/raw?id={row['id']}&kind=secret")[0] == 400


@pytest.mark.slow
def test_diff_opens_at_the_first_difference_with_both_sides(web):
    msgs = _conversation(web, "edit", turns=2)
    anthropic_client(web.url, "edit").messages.create(
        model="claude-sonnet-4-6",
        max_tokens=50,
        messages=msgs,
        system=[
            {"type": "text", "text": SYSTEM.replace("careful", "careless", 1), "cache_control": {"type": "ephemeral"}}
        ],
    )
    rows = web.wait_for_calls(3)
    status, d = _json(web, f"/_ctxscope/api/diff?id={rows[2]['id']}")
    assert status == 200 and d["old"]["id"] == rows[1]["id"] and d["new"]["relation"] == "DIVERGED"
    first = d["diff"]["changes"][0]
    assert d["diff"]["first_pointer"] == "/system/0/text" == first["pointer"]
    assert d["focus"] == "/system/0/text" and d["inspector"]["pointer"] == "/system/0/text"
    assert "careful" in first["old"] and "careless" in first["new"]
    assert [c["op"] for c in d["diff"]["changes"][1:]] == ["added", "added"]  # the appended turn
    # against an explicit base, and a first call has nothing to compare with
    base = _json(web, f"/_ctxscope/api/diff?id={rows[2]['id']}&base={rows[0]['id']}")[1]
    assert base["old"]["id"] == rows[0]["id"]
    none = _json(web, f"/_ctxscope/api/diff?id={rows[0]['id']}")[1]
    assert none["diff"] is None and none["reason"] == "this call has no predecessor"


@pytest.mark.slow
def test_delete_needs_the_page_token_and_a_same_origin_request(web):
    _conversation(web, "doomed", turns=2)
    _conversation(web, "kept", turns=2, system=SYSTEM)  # identical bodies share blobs across sessions
    rows = web.wait_for_calls(4)
    kept = [r for r in rows if r["session"] == "kept"]
    db = open_db(web.db_path)
    before = {r["id"]: (get_request_raw(db, r["id"]), get_response_raw(db, r["id"])) for r in kept}
    db.close()
    path = "/_ctxscope/api/session?s=doomed"
    token = _token(web)
    assert _req(web, path, method="DELETE")[0] == 403
    assert _req(web, path, method="DELETE", headers={"X-Ctxscope-Token": "0" * 48})[0] == 403
    evil = {"X-Ctxscope-Token": token, "Origin": "http://evil.example"}
    assert _req(web, path, method="DELETE", headers=evil)[0] == 403
    cross = {"X-Ctxscope-Token": token, "Sec-Fetch-Site": "cross-site"}
    assert _req(web, path, method="DELETE", headers=cross)[0] == 403
    ok = {"X-Ctxscope-Token": token, "Origin": web.url, "Sec-Fetch-Site": "same-origin"}
    status, result = _json(web, path, method="DELETE", headers=ok)
    assert status == 200 and result["calls_deleted"] == 2
    assert _json(web, path, method="DELETE", headers=ok)[0] == 404
    sessions = {s["session"] for s in _json(web, "/_ctxscope/api/sessions")[1]["sessions"]}
    assert sessions == {"kept"}
    db = open_db(web.db_path)
    assert {r["id"]: (get_request_raw(db, r["id"]), get_response_raw(db, r["id"])) for r in kept} == before
    db.close()
    # the same label sending again still stores recoverable bodies (the writer's delta bases survived)
    _conversation(web, "doomed", turns=2)
    again = [r for r in web.wait_for_calls(4) if r["session"] == "doomed"]
    db = open_db(web.db_path)
    assert all(json.loads(get_request_raw(db, r["id"]))["messages"][0]["content"] == "start" for r in again)
    db.close()


@pytest.mark.slow
def test_delete_frees_bodies_nothing_else_needs(web):
    from ctxscope.inspector.store.deletion import KEEP_TAIL, delete_session

    _conversation(web, "big", turns=KEEP_TAIL + 6, system="A long session. " * 300)
    _conversation(web, "other", turns=3, system="Another agent. " * 300)
    rows = web.wait_for_calls(KEEP_TAIL + 9)
    db = open_db(web.db_path)
    other = {r["id"]: get_request_raw(db, r["id"]) for r in rows if r["session"] == "other"}
    blobs_before = db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0]
    result = delete_session(db, "big")
    assert result["calls_deleted"] == KEEP_TAIL + 6 and result["blobs_deleted"] > 0
    assert db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == blobs_before - result["blobs_deleted"]
    assert {i: get_request_raw(db, i) for i in other} == other
    dangling = db.execute(
        "SELECT COUNT(*) FROM blobs WHERE base IS NOT NULL AND base NOT IN (SELECT id FROM blobs)"
    ).fetchone()[0]
    assert dangling == 0
    db.close()


def _read_events(web, out: list, ready: threading.Event, stop: threading.Event):
    with urllib.request.urlopen(web.url + "/_ctxscope/api/events", timeout=10) as resp:
        out.append(("headers", dict(resp.headers)))
        event = None
        ready.set()
        while not stop.is_set():
            line = resp.readline()
            if not line:
                break
            line = line.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                out.append((event, json.loads(line[6:])))
                if event == "calls":
                    stop.set()


@pytest.mark.slow
def test_events_stream_announces_new_calls(web):
    out: list = []
    ready, stop = threading.Event(), threading.Event()
    reader = threading.Thread(target=_read_events, args=(web, out, ready, stop), daemon=True)
    reader.start()
    assert ready.wait(10)  # headers arrive once the stream knows the last call: nothing after it is missed
    openai_client(web.url, "live").chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    reader.join(10)
    headers = out[0][1]
    assert headers["Content-Type"].startswith("text/event-stream") and "Content-Security-Policy" in headers
    calls = [data for event, data in out[1:] if event == "calls"]
    assert calls and calls[0][0]["session"] == "live" and calls[0][0]["model"] == "gpt-4o"
    status = [data for event, data in out[1:] if event == "status"]
    assert status and status[0]["failures"] == 0 and status[0]["running"]


@pytest.mark.slow
def test_daemon_stops_promptly_with_a_page_listening(tmp_path):
    d = start_web_daemon(tmp_path)
    out: list = []
    ready, stop = threading.Event(), threading.Event()
    threading.Thread(target=_read_events, args=(d, out, ready, stop), daemon=True).start()
    assert ready.wait(10)
    d.loop.call(d.daemon.stop(), timeout=15)  # aiohttp would otherwise wait 60 s for the open stream
    d.loop.call(d.sim_runner.cleanup())
    d.loop.stop()


@pytest.mark.slow
def test_status_reports_the_writer(web):
    status, data = _json(web, "/_ctxscope/api/status")
    assert status == 200 and data["writer"]["running"] and data["writer"]["failures"] == 0
    assert data["store"]["calls"] == 0
    status, data = _json(web, "/_ctxscope/api/status?store=0")  # the cheap form for frequent polls
    assert status == 200 and set(data) == {"writer"} and data["writer"]["queued"] == 0


async def test_a_ui_without_a_writer_refuses_to_delete_rather_than_write_itself(tmp_path):
    from aiohttp import web as aioweb
    from aiohttp.test_utils import TestClient, TestServer

    from ctxscope.web.routes import add_web_routes

    db = tmp_path / "c.db"
    open_db(db).close()
    app = aioweb.Application()
    add_web_routes(app, db, None)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        page = await (await client.get("/")).text()
        token = page.split('name="ctxscope-token" content="', 1)[1].split('"', 1)[0]
        resp = await client.delete("/_ctxscope/api/session?s=any", headers={"X-Ctxscope-Token": token})
        assert resp.status == 503 and "writer" in (await resp.json())["error"]
