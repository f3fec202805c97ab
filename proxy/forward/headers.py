"""Which headers cross the proxy, in each direction.

Hop-by-hop headers describe one connection and stop here; ``x-ctxscope-*`` annotations are meant
for the capture, not the upstream; every other header goes on as sent, in its case and order, and
aiohttp must not add one the client did not send. Clients send the same few header names on every
call, so what each spelling of a name means is remembered rather than worked out again.
"""

from __future__ import annotations

from ctxscope.vocab.headers import ANNOTATION_PREFIX

RawHeaders = tuple[tuple[bytes, bytes], ...]  # as aiohttp reads them (``raw_headers``)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# aiohttp sets these itself for the upstream request (Host from the URL, length from the body).
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length"}
# Whatever an upstream returns is served on the UI's origin: a sandboxed document runs no script
# and has an origin of its own, so an upstream's HTML cannot read the UI's token or call its API.
SANDBOX = (("Content-Security-Policy", "sandbox"), ("X-Content-Type-Options", "nosniff"))
_RESPONSE_DROP = HOP_BY_HOP | {"x-content-type-options"}

# Never let aiohttp invent headers the client did not send. Telling aiohttp so costs it a few
# copies per request, so it is only told when one of them is missing (clients rarely omit any).
_SKIP_AUTO = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})
_AUTO_BITS = {"accept": 1, "accept-encoding": 2, "user-agent": 4, "content-type": 8}
_AUTO_WITHOUT_BODY, _AUTO_WITH_BODY = 7, 15  # aiohttp adds Content-Type only to a body

# Caches of header names as spelled on the wire, bounded: a hostile client may send a new name
# with every request.
MAX_CACHED = 4096
_FORWARD, _DROP, _ANNOTATION = 0, 1, 2
_request_names: dict[bytes, tuple[str, str, int, int]] = {}  # -> (name, lowercase name, kind, auto bit)
_response_names: dict[bytes, tuple[str, bool]] = {}  # -> (name, left out of the client's copy)


def _request_name(raw: bytes) -> tuple[str, str, int, int]:
    known = _request_names.get(raw)
    if known is None:
        name = raw.decode("latin-1")
        lname = name.lower()
        kind = _ANNOTATION if lname.startswith(ANNOTATION_PREFIX) else _DROP if lname in _REQUEST_DROP else _FORWARD
        known = (name, lname, kind, _AUTO_BITS.get(lname, 0))
        if len(_request_names) < MAX_CACHED:
            _request_names[raw] = known
    return known


def split_request_headers(raw_headers: RawHeaders) -> tuple[list[tuple[str, str]], list[tuple[str, str]], int]:
    """Headers to forward (original case and order), the x-ctxscope-* annotations to strip (name
    lowercased), and a bit set of the headers aiohttp would otherwise add that are present."""
    forward, annotations, present = [], [], 0
    names = _request_names
    for k, v in raw_headers:
        name, lname, kind, bit = names.get(k) or _request_name(k)
        if kind == _FORWARD:
            forward.append((name, v.decode("latin-1")))
            present |= bit
        elif kind == _ANNOTATION:
            annotations.append((lname, v.decode("latin-1")))
    return forward, annotations, present


def skip_auto_headers(present: int, has_body: bool) -> frozenset[str] | None:
    """What aiohttp must not add to the upstream request; None (the cheap case) when the client
    sent all of them already."""
    needed = _AUTO_WITH_BODY if has_body else _AUTO_WITHOUT_BODY
    return None if present & needed == needed else _SKIP_AUTO


def annotation(annotations: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in annotations if k == name), None)


def _response_name(raw: bytes) -> tuple[str, bool]:
    """A response header name as text, and whether the client's copy leaves it out: hop-by-hop
    ones, and X-Content-Type-Options, which the sandbox sets itself."""
    known = _response_names.get(raw)
    if known is None:
        name = raw.decode("latin-1")
        known = (name, name.lower() in _RESPONSE_DROP)
        if len(_response_names) < MAX_CACHED:
            _response_names[raw] = known
    return known


def split_response_headers(raw_headers: RawHeaders) -> tuple[tuple[tuple[str, str], ...], list[tuple[str, str]]]:
    """The upstream's response headers as received (for the capture), and as the client gets them:
    without hop-by-hop ones, and sandboxed (see "Upstream content is sandboxed" in
    docs/architecture.md). A list, so aiohttp's response builds its header dict once."""
    received, forward = [], []
    names = _response_names
    for k, v in raw_headers:
        name, drop = names.get(k) or _response_name(k)
        pair = (name, v.decode("latin-1"))
        received.append(pair)
        if not drop:
            forward.append(pair)
    forward += SANDBOX  # its policy beside any of the upstream's own
    return tuple(received), forward


def client_response_headers(received: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """Response headers already decoded (``received``) as the client gets them (as above)."""
    return [(n, v) for n, v in received if n.lower() not in _RESPONSE_DROP] + list(SANDBOX)
