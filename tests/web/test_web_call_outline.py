"""The call and diff pages fetch what they show: a 4 MB prompt's call API answers with its outline
(structure, sizes, previews, the changed region) under 1 MB, a block comes back exactly by pointer
a page at a time, hostile pointers get a clear 400/404, and the diff sends changed regions only."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from ctxscope.inspector.store.queries import open_db

from support.big_calls import HOSTILE, big_session
from support.factories import T0, analysed, anthropic_request, make_exchange
from support.web_fixtures import KEY, start_web_daemon

pytestmark = pytest.mark.slow


def _get(web, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(web.url + path, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _json(web, path: str) -> tuple[int, dict]:
    status, body = _get(web, path)
    return status, json.loads(body)


def _node(web, call_id: str, ptr: str, **params) -> tuple[int, dict]:
    query = urllib.parse.urlencode({"id": call_id, "kind": "request", "ptr": ptr, **params})
    return _json(web, f"/_ctxscope/api/node?{query}")


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("big")
    first, second = big_session(tmp, 4_000_000)
    db = open_db(tmp / "captures.db")
    ids = [r["id"] for r in db.query("SELECT id FROM calls ORDER BY seq")]
    db.close()
    web = start_web_daemon(tmp)
    yield web, ids, first, second
    web.stop()


def test_first_load_of_a_4mb_prompt_is_its_outline_under_1mb(big):
    web, ids, _first, second = big
    status, raw = _get(web, f"/_ctxscope/api/call?id={ids[1]}")
    assert status == 200
    assert len(json.dumps(second)) > 4_000_000 and len(raw) < 1_000_000  # was the whole 4 MB body
    d = json.loads(raw)
    structure = len(json.dumps(d["request"])) + len(json.dumps(d["request_outline"]))
    assert structure < 64 * 1024  # 1,287 messages: their structure, not their text
    n = len(second["messages"])
    assert d["request_outline"]["folds"]["/messages"] == {"length": n, "from": 1, "to": n - 6}
    assert len(d["request"]["messages"]) == 7 and d["request"]["messages"][-1] == second["messages"][-1]
    system = second["system"][0]["text"]
    assert d["request"]["system"][0]["text"] == system[:300]
    assert d["request_outline"]["texts"]["/system/0/text"] == {"chars": len(system), "bytes": len(system.encode())}
    region = d["changed_region"]  # the break, cut to its window on both sides
    assert region["pointer"] == d["call"]["pointer"] and "EDITED BY THE CLIENT" in region["new"]
    assert "EDITED" not in region["old"] and region["head_chars"] > 0 and len(region["new"]) < 2000


def test_a_block_fetched_by_pointer_round_trips_across_pages(big):
    web, ids, _first, second = big
    ptr = "/messages/2/content/0/content"  # inside the folded middle, multi-byte text and markup
    whole = second["messages"][2]["content"][0]["content"]
    parts, offset = [], 0
    while offset is not None:
        status, page = _node(web, ids[1], ptr, offset=offset, limit=777)
        assert status == 200 and page["type"] == "string" and page["chars"] == len(whole)
        parts.append(page["text"])
        offset = page["next_offset"]
    assert "".join(parts) == whole and len(parts) > 5 and HOSTILE in whole
    status, page = _node(web, ids[1], "/system/0/text", limit=10**9)  # a page is capped
    assert status == 200 and len(page["text"]) == len(second["system"][0]["text"]) <= 65_536
    status, items = _node(web, ids[1], "/messages", **{"from": 1, "limit": 500})
    assert status == 200 and items["from"] == 1 and items["to"] == 101 and items["length"] == len(second["messages"])
    assert (
        items["items"][1]["content"][0]["content"] == whole[:300] and "/messages/2/content/0/content" in items["texts"]
    )


@pytest.mark.parametrize(
    ("ptr", "params", "status"),
    [
        ("/messages/../system", {}, 400),  # a path climb is not a list index
        ("/messages/x", {}, 400),
        ("/messages/01", {}, 400),
        ("/messages/-1", {}, 400),
        ("/messages/99999999999999999999", {}, 404),
        ("/system~2/0", {}, 400),  # ~ must be ~0 or ~1
        ("/nope~1x", {}, 404),
        ("messages", {}, 400),
        ("/" + "a" * 5000, {}, 400),  # longer than any pointer the page makes
        ("/system/0/text/0", {}, 404),  # inside a string
        ("/system/0/text", {"offset": 10**12}, 400),
        ("/system/0/text", {"offset": -5}, 400),
        ("/system/0/text", {"offset": "1e3"}, 400),
        ("/messages", {"from": 10**9}, 400),
    ],
)
def test_hostile_pointers_get_a_clear_400_or_404(big, ptr, params, status):
    web, ids, _first, _second = big
    got, body = _node(web, ids[1], ptr, **params)
    assert got == status and isinstance(body.get("error"), str) and "Traceback" not in body["error"]
    assert _node(web, "nope", "/messages")[0] == 404
    assert _json(web, f"/_ctxscope/api/node?id={ids[1]}&kind=secret&ptr=")[0] == 400


def test_the_diff_sends_changed_regions_and_the_identical_text_by_pointer(big):
    web, ids, _first, second = big
    status, raw = _get(web, f"/_ctxscope/api/diff?id={ids[1]}")
    assert status == 200 and len(raw) < 256 * 1024  # both bodies are 8 MB
    changes = json.loads(raw)["diff"]["changes"]
    edit = next(c for c in changes if c["op"] == "changed")
    assert "EDITED BY THE CLIENT" in edit["new"] and edit["head_chars"] > 2000
    whole = second["messages"][int(edit["pointer"].split("/")[2])]["content"][0]["content"]
    assert edit["new_chars"] == len(whole) and whole[edit["head_chars"] :].startswith(edit["new"])
    status, head = _node(web, ids[1], edit["pointer"], offset=0, limit=edit["head_chars"])
    assert status == 200 and head["text"] == whole[: edit["head_chars"]]
    added = [c for c in changes if c["op"] == "added"]
    assert [c["pointer"] for c in added] == [
        f"/messages/{len(second['messages']) - 2}",
        f"/messages/{len(second['messages']) - 1}",
    ]
    status, one = _json(web, f"/_ctxscope/api/diff?id={ids[1]}&change={changes.index(edit)}")
    assert status == 200 and one["diff"]["changes"] == [edit]
    assert _json(web, f"/_ctxscope/api/diff?id={ids[1]}&change=9999")[0] == 404


def test_no_preview_page_or_window_ends_inside_a_key(tmp_path):
    """A key in a long text, placed so the preview (300), a page (295) and the diff's window (300
    before the change) all cut through it: masked whole before anything is cut."""
    text = "a " * 145 + KEY + " b" * 1000
    edited = text[:600] + "CHANGED" + text[600:]
    system = "You are a coding agent. " * 400  # a shared prefix: the edit is a break, not a new start
    bodies = [anthropic_request([{"role": "user", "content": t}], system=system) for t in (text, edited)]
    exchanges = [make_exchange(request=b, session_label="keys", started_at=T0 + n) for n, b in enumerate(bodies)]
    db, _ = analysed(tmp_path / "captures.db", exchanges)
    ids = [r["id"] for r in db.query("SELECT id FROM calls ORDER BY seq")]
    db.conn.close()
    web = start_web_daemon(tmp_path)
    try:
        secret = KEY[-16:]
        answers = [_get(web, f"/_ctxscope/api/call?id={ids[1]}")[1], _get(web, f"/_ctxscope/api/diff?id={ids[1]}")[1]]
        offset = 0
        while offset is not None:
            status, page = _node(web, ids[1], "/messages/0/content", offset=offset, limit=295)
            assert status == 200
            answers.append(page["text"].encode())
            offset = page["next_offset"]
        assert not [a for a in answers if secret.encode() in a or secret[:8].encode() in a]
        detail = json.loads(answers[0])
        assert detail["call"]["relation"] == "DIVERGED", (detail["call"]["relation"], detail["call"]["pointer"])
        assert detail["changed_region"]["head_chars"] > 0 and "CHANGED" in detail["changed_region"]["new"]
    finally:
        web.stop()
