"""The vocabulary the UI reads from the API: the endpoint's answer, and a real page that lists a
filter's options from it (Debian's chromium via Playwright) instead of from a copy of its own."""

from __future__ import annotations

import ast
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from ctxscope.vocab.apis import Api
from ctxscope.vocab.headers import Annotation
from ctxscope.vocab.kinds import (
    CacheVerdict,
    CompactionTrigger,
    EpochReason,
    GroupedBy,
    MarkerKind,
    Outcome,
    ProviderAgreement,
    RelationKind,
    SearchArea,
)
from ctxscope.vocab.words import WORDS

from support.web_fixtures import anthropic_client, start_web_daemon

ENUMS = (
    Api,
    RelationKind,
    EpochReason,
    CacheVerdict,
    Outcome,
    MarkerKind,
    GroupedBy,
    SearchArea,
    CompactionTrigger,
    Annotation,
    ProviderAgreement,
)


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    d = start_web_daemon(tmp_path_factory.mktemp("vocab"))
    yield d
    d.stop()


def _get(url: str, headers: dict[str, str] | None = None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_the_vocabulary_endpoint_answers_every_enum_member_by_name(web):
    status, headers, body = _get(web.url + "/_ctxscope/api/vocabulary")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert "default-src 'self'" in headers["Content-Security-Policy"]  # an API answer like the others
    data = json.loads(body)
    words = data.pop("words")
    sentences = data.pop("sentences")
    assert "cache-read rate" in sentences["loss_pricing"] and "cache reads and writes" in sentences["prompt_tokens"]
    assert set(data) == {e.__name__ for e in ENUMS}
    assert words == {kind.__name__: {str(v): w for v, w in table.items()} for kind, table in WORDS.items()}
    assert words["RelationKind"]["APPEND_ONLY"] == "append" and words["CacheVerdict"]["client_break"] == "break"
    for enum in ENUMS:
        table = data[enum.__name__]
        assert list(table.items()) == [(m.name, m.value) for m in enum], enum.__name__  # every member, in order
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in table.items())


def test_every_strenum_in_the_vocabulary_sources_is_served():
    """A new word list in any module of vocab/ must reach the page: the endpoint serves them all."""
    from ctxscope.web.vocabulary import vocabulary

    declared = set()
    for path in (Path(__file__).resolve().parents[2] / "vocab").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("StrEnum") for b in node.bases):
                declared.add(node.name)
    assert declared == {e.__name__ for e in ENUMS} == set(vocabulary())


def test_the_vocabulary_endpoint_refuses_a_foreign_host(web):
    status, _, _ = _get(web.url + "/_ctxscope/api/vocabulary", {"Host": "attacker.example"})
    assert status == 421


def _one_call(web, session: str) -> None:
    client = anthropic_client(web.url, session)
    client.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    web.wait_for_calls(1, session=session)


def _options(page, label: str) -> list[str]:
    return page.get_by_label(label, exact=True).locator("option").evaluate_all("els => els.map((e) => e.value)")


def test_the_filters_list_exactly_the_kinds_the_api_answers(web, page):
    _one_call(web, "vocab-real")
    page.goto(web.url + "/#/session/vocab-real")
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(1)
    assert _options(page, "relation") == ["", *RelationKind]
    assert _options(page, "cache") == ["", *CacheVerdict]
    assert _options(page, "marker") == ["", *MarkerKind]


def test_a_relation_kind_that_only_the_api_knows_reaches_the_page(web, page):
    """The API's answer is altered on its way to the page: the filter follows it, so no copy of the
    list lives in the page's script."""
    _one_call(web, "vocab-routed")

    def altered(route):
        answer = route.fetch()
        data = answer.json()
        data["RelationKind"]["SPLICED"] = "SPLICED"
        route.fulfill(response=answer, body=json.dumps(data))

    page.route("**/_ctxscope/api/vocabulary", altered)
    page.goto(web.url + "/#/session/vocab-routed")
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(1)
    assert _options(page, "relation") == ["", *RelationKind, "SPLICED"]
    expect(page.get_by_label("relation", exact=True).locator("option[value='SPLICED']")).to_have_text("SPLICED")
