from ctxscope.inspector.analyses.marker_text import marker_summary


def test_provenance_markers_read_as_sentences():
    assert (
        marker_summary({"kind": "sources_available", "detail": {"count": 3, "new": 2, "kinds": "file,web"}})
        == "2 new source(s) the answer may cite, 3 in all (file,web)"
    )
    assert (
        marker_summary({"kind": "citations", "detail": {"count": 1, "missing": 2}})
        == "the previous answer cited 1 source(s); 2 quoted without a citation"
    )
    assert "without citing it" in marker_summary({"kind": "source_citation_retry", "detail": {"source": "S2"}})


def test_odd_client_parameters_never_raise():
    assert marker_summary({"kind": "citations", "detail": {"count": object()}})
    assert marker_summary({"kind": "unknown_kind", "detail": None}) == ""
