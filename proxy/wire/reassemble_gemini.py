"""Gemini generateContent streams (SSE frames or a JSON array of them) merged into one response."""

from __future__ import annotations

from ctxscope.proxy.wire.reassemble import StreamHandler, as_dict, error_of, first_field, index_of
from ctxscope.proxy.wire.sse import SSEEvent


class GeminiStream(StreamHandler):
    """Each frame is a GenerateContentResponse; text parts merge, the last usageMetadata wins."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict | None = None
        self.cands: dict[int, dict] = {}

    def on(self, event: SSEEvent, data: object) -> None:
        if not isinstance(data, dict):
            return
        frame: dict = data
        if isinstance(frame.get("response"), dict) and "candidates" not in frame:
            frame = frame["response"]  # Code Assist wraps each frame
        if frame.get("error"):
            self.error = error_of(frame)
            return
        self.last = frame
        if isinstance(frame.get("usageMetadata"), dict):
            self.usage = frame["usageMetadata"]
        for pos, cand in enumerate(frame.get("candidates") or ()):
            if not isinstance(cand, dict):
                continue
            st = self.cands.setdefault(index_of(cand, default=pos), {"fields": {}, "role": None, "parts": []})
            st["fields"].update({k: v for k, v in cand.items() if k != "content"})
            if cand.get("finishReason"):
                self.complete = True
            content = as_dict(cand.get("content"))
            if content.get("role"):
                st["role"] = content["role"]
            for part in content.get("parts") or ():
                if isinstance(part, dict):
                    self._part(st["parts"], part)

    @staticmethod
    def _part(parts: list, part: dict) -> None:
        text = part.get("text")
        if not isinstance(text, str):
            parts.append([part, None])
            return
        prev = parts[-1] if parts else None
        plain = set(part) <= {"text", "thought"}
        if plain and prev and prev[1] is not None and bool(prev[0].get("thought")) == bool(part.get("thought")):
            prev[1].append(text)
        else:
            parts.append([part, [text]])

    def build(self) -> tuple[dict | None, str | None]:
        if self.last is None:
            return None, None
        body = {k: v for k, v in self.last.items() if k != "candidates"}
        cands = []
        for i in sorted(self.cands):
            st = self.cands[i]
            parts = [part if pieces is None else {**part, "text": "".join(pieces)} for part, pieces in st["parts"]]
            content: dict = {"parts": parts}
            if st["role"]:
                content["role"] = st["role"]
            cands.append({"content": content, **st["fields"]})
        body["candidates"] = cands
        if self.usage is not None:
            body["usageMetadata"] = self.usage
        return body, first_field(cands, "finishReason")
