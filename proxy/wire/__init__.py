"""The providers' wire formats as the store reads them: API detection, SSE, encodings, streams, usage.

Nothing here runs on the hot path; the writer uses it to turn raw bytes into meaning
(docs/architecture.md, "The hot path parses nothing").
"""
