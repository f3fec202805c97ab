"""Citation normalisation and the conservative "evidently uses a source" test (pure functions)."""

from __future__ import annotations

from ctxscope.agent.provenance.cite import normalise
from ctxscope.agent.provenance.quotes import MIN_WORDS, QuoteIndex
from ctxscope.agent.provenance.refs import SourceCatalog, SourceReference


def catalog() -> SourceCatalog:
    cat = SourceCatalog()
    cat.add(SourceReference("file", "src/app.py:10-20", "app.py", "a" * 64, path="src/app.py", lines=(10, 20)))
    cat.add(SourceReference("web", "https://docs.example/cache", "Cache", "b" * 64, url="https://docs.example/cache"))
    cat.add(SourceReference("mcp", "tickets://42", "Ticket 42", "c" * 64))
    return cat


def test_id_citations_take_one_form():
    c = normalise(
        "A [^S2]. B 【S1】. C [s 2]. D [S1, S2]. E [source: S2]. F [source 1]. G (see S2). "
        "H [[S1]]. I [S1; S2 and S3]. J [S1].",
        catalog(),
    )
    assert c.text == ("A [S2]. B [S1]. C [S2]. D [S1][S2]. E [S2]. F [S1]. G [S2]. H [S1]. I [S1][S2][S3]. J [S1].")
    assert c.rewritten == 9 and set(c.cited) == {"S1", "S2", "S3"} and c.unknown == ()


def test_file_citations_take_one_form():
    c = normalise(
        "[src/app.py#L10-L12], [src/app.py:L10-12], [src/app.py, lines 10–12], [src/app.py: 10], "
        "[./src/app.py (lines 3-3)], [src/app.py]",
        catalog(),
    )
    assert c.text == (
        "[src/app.py:10-12], [src/app.py:10-12], [src/app.py:10-12], [src/app.py:10], [src/app.py:3], [src/app.py]"
    )
    assert c.cited == ("S1",) and c.rewritten == 5


def test_what_is_left_alone():
    cat = catalog()
    text = (
        "Amazon (S3) and [S9] and [other.py#L3] and [src/app.py#L1](src/app.py#L1) and `[^S1]` and\n"
        "```\nx = [^S2]\n```\n and [1]"
    )
    c = normalise(text, cat)
    assert c.text == text and c.rewritten == 0
    assert c.unknown == ("S9",) and c.cited == ("S1",)  # the path in the link text names S1


def test_a_mixed_group_with_an_unknown_id_is_kept_as_written():
    c = normalise("see [S1, S99]", catalog())
    assert c.text == "see [S1, S99]" and c.unknown == ("S99",)


def test_naming_a_source_counts_as_citing_it():
    cat = catalog()
    assert normalise("as src/app.py says", cat).cited == ("S1",)
    assert normalise("as app.py says", cat).cited == ("S1",)  # a file name with an extension
    assert normalise("see docs.example/cache", cat).cited == ("S2",)
    assert normalise("per tickets://42", cat).cited == ("S3",)
    assert normalise("the app is fine; myapp.py differs", cat).cited == ()
    assert normalise("nothing cited here", cat).cited == ()


SOURCE = (
    "The scheduler wakes every thirty seconds, collects the jobs whose deadline has passed, and hands "
    "them to the worker pool in order of priority, highest first, breaking ties by submission time."
)


def test_a_long_verbatim_run_is_evident_use_even_rewrapped_and_repunctuated():
    idx = QuoteIndex()
    idx.add("S1", "unrelated preamble\n" + SOURCE + "\nunrelated tail")
    answer = (
        "In short: the SCHEDULER wakes every thirty seconds,\ncollects the jobs whose deadline has passed -- "
        "and hands them to the worker pool. That is all."
    )
    [hit] = idx.find(answer)
    assert hit.source_id == "S1" and hit.words >= MIN_WORDS
    assert hit.excerpt.startswith("the scheduler wakes every thirty seconds")
    assert hit.excerpt.endswith("hands them to the worker pool")


def test_paraphrase_shared_words_and_short_quotes_are_not():
    idx = QuoteIndex()
    idx.add("S1", SOURCE)
    assert idx.find("Every half minute the scheduler picks overdue jobs and gives them to workers by priority.") == []
    # eleven words verbatim is below the bar
    assert idx.find("Note: the scheduler wakes every thirty seconds, collects the jobs whose deadline - end.") == []
    assert idx.find("") == [] and QuoteIndex().find(SOURCE) == []


def test_a_run_the_user_wrote_does_not_count():
    idx = QuoteIndex()
    idx.add("S1", SOURCE)
    assert idx.find(SOURCE, exclude="I read that " + SOURCE) == []
    assert idx.find(SOURCE, exclude="something else")[0].source_id == "S1"


def test_the_longest_run_per_source_and_several_sources():
    idx = QuoteIndex()
    other = "Retries back off exponentially from one second up to a ceiling of five minutes between attempts."
    idx.add("S1", SOURCE)
    idx.add("S2", other)
    hits = idx.find(SOURCE + " Also: " + other)
    assert [h.source_id for h in hits] == ["S1", "S2"]


def test_memory_is_bounded_and_old_sources_are_dropped():
    idx = QuoteIndex(max_chars=2000)
    idx.add("S1", SOURCE)
    for i in range(40):
        idx.add(f"S{i + 2}", " ".join(f"w{i}x{j}" for j in range(60)))
    assert idx.find(SOURCE) == [] and len(idx) < 10
    assert len(idx._index) < 3 * sum(d.fingerprints for d in idx._docs.values()) + 1024


def test_an_answer_is_checked_by_lookups_not_by_scanning_sources(monkeypatch):
    import ctxscope.agent.provenance.quotes as pq

    confirmed = []
    real = pq._confirm
    monkeypatch.setattr(pq, "_confirm", lambda *a: confirmed.append(a[3]) or real(*a))
    idx = QuoteIndex()
    for i in range(300):
        idx.add(f"S{i}", " ".join(f"tok{i}_{j}" for j in range(400)))
    answer = " ".join(f"word{j}" for j in range(400)) + " " + " ".join(f"tok299_{j}" for j in range(20))
    hits = idx.find(answer)
    assert [h.source_id for h in hits] == ["S299"] and hits[0].words == 20
    assert len(confirmed) == 1  # one fingerprint hit confirmed; the other 299 sources were never compared
