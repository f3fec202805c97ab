#!/usr/bin/env python
"""How close the cache advisor's predicted saving comes to what the simulator shows
(docs/architecture.md, "The cache advisor").

Recorded sessions, each stored through the real writer with its analyzer:

- the demo's scripted session (Anthropic Messages, through a real daemon against its simulator);
- crafted Claude Code-shaped sessions (six tools, a long system prompt in blocks, tool rounds):
  with no breakpoints, with a misplaced one (on the first message only), with a churning system
  prompt (a timestamp at its top), each with short gaps and with gaps over 5 minutes.

For each: ``advise`` names the best alternative and its predicted saving over the client's
placement; ``--verify``'s replay re-sends the session as sent and with that placement through the
daemon's simulator at the calls' recorded times, and prices what the simulator reports. The last
line is

    advisor: predicted saving X%, simulated Y%, error Z pts over N sessions

(X and Y are means over the sessions; Z is the mean absolute difference; the line before gives the
worst). The sessions' saving is now the top advice's (which may be a cause, not a placement).
On 2 shared cores it took 42 s and printed predicted 44.3%, simulated 44.4%, error 0.09 pts over 7
sessions (worst 0.24): both sides count o200k tokens, so what is left is the simulator's own block
framing (a tool call counts its input only).

Then, per cause (``bench/advisor_probe/advisor_sessions.py``: a timestamp in the system prompt, tools
reordered once, Claude Code's billing header to a third-party upstream, 6-minute gaps on a 5-minute
TTL), for Anthropic Messages and OpenAI Responses: the top advice, its predicted saving, the
simulated saving of the session re-sent without the cause (built independently of the advisor)
and whether ``--verify`` agrees with the simulator within 5 points.

    .venv/bin/python bench/advisor.py          # under a minute
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from ctxscope import demo_script as script
from ctxscope.daemon import start_daemon
from ctxscope.demo import count_model_requests, run_scenario, wait_for_analysis
from ctxscope.inspector.advisor.alternatives import advise
from ctxscope.inspector.advisor.load import load_session
from ctxscope.inspector.pipeline.analyze import Analyzer
from ctxscope.inspector.store.queries import open_db
from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.investigate.advise_verify import verify_advice
from ctxscope.proxy.exchange import Exchange
from ctxscope.settings import DaemonConfig

sys.path.insert(0, str(Path(__file__).resolve().parent / "advisor_probe"))  # the per-cause sessions

import advisor_sessions as cases

from ctxscope.inspector.advisor.causes import AS_SENT
from ctxscope.inspector.advisor.model import Session, build_session
from ctxscope.investigate.advise_verify import simulate
from ctxscope.simulator.control.client import SimulatorControl

T0 = 1_760_000_000.0
SHORT = [20.0] * 9
LONG = [20.0, 420.0, 20.0, 900.0, 20.0, 20.0, 1500.0, 20.0, 20.0]


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def crafted(kind: str, gaps: list[float], label: str) -> list[Exchange]:
    tools = [
        {"name": n, "description": words(180, n), "input_schema": {"type": "object"}}
        for n in ("Read", "Edit", "Bash", "Grep", "Glob", "Write")
    ]
    messages: list = [{"role": "user", "content": [{"type": "text", "text": "fix the failing test"}]}]
    out, t = [], 0.0
    for i in range(len(gaps) + 1):
        head = f"Current time: 2026-12-01T10:{i:02d}:{(i * 7) % 60:02d}Z. " if kind == "churning" else ""
        system = [
            {"type": "text", "text": head + "You are a coding agent."},
            {"type": "text", "text": words(2200, "policy")},
        ]
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": system,
            "tools": tools,
            "messages": json.loads(json.dumps(messages)),
        }
        if kind == "misplaced":
            body["messages"][0]["content"][0]["cache_control"] = {"type": "ephemeral"}
        if kind == "churning":
            body["system"][1]["cache_control"] = {"type": "ephemeral"}
        response = {
            "id": f"msg_{i}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 3},
        }
        out.append(
            Exchange(
                id=f"{int(T0 + t) * 1000:016x}{label[:3]}{i:03d}",
                provider="anthropic",
                upstream="https://api.anthropic.com",
                method="POST",
                path="/v1/messages",
                query="",
                session_label=label,
                annotations=(),
                request_headers=(("content-type", "application/json"),),
                key_fingerprint="b" * 16,
                request_body=json.dumps(body).encode(),
                status=200,
                response_headers=(("content-type", "application/json"),),
                response_body=json.dumps(response).encode(),
                started_at=T0 + t,
                first_byte_at=T0 + t + 0.2,
                ended_at=T0 + t + 0.4,
                outcome="ok",
                error=None,
                client="bench-advisor/1.0",
            )
        )
        t += gaps[i] if i < len(gaps) else 0.0
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"path": f"f{i}.py"}}
        messages += [
            {"role": "assistant", "content": [use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": words(400, f"line{i}x")}],
            },
        ]
    return out


def store(path: Path, exchanges: list[Exchange]) -> None:
    writer = CaptureWriter(path, analyzers=[Analyzer()])
    writer.start()
    for ex in exchanges:
        writer.submit(ex)
    if not writer.stop() or writer.stats().failed:
        raise SystemExit(f"storing the crafted sessions failed: {writer.stats().last_error}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CTXSCOPE_HOME"] = str(Path(tmp) / "home")
        crafted_db = Path(tmp) / "crafted.db"
        sessions: list[tuple[Path, str]] = []
        for kind in ("none", "misplaced", "churning"):
            for name, gaps in (("short", SHORT), ("long", LONG)):
                label = f"{kind}-{name}"
                store(crafted_db, crafted(kind, gaps, label))
                sessions.append((crafted_db, label))
        cfg = DaemonConfig(host="127.0.0.1", port=0, db=Path(tmp) / "demo.db")
        daemon = await start_daemon(cfg)
        try:
            await daemon.sim.start()  # it starts on its first use
            sim = daemon.sim.control()
            demo = await run_scenario(
                daemon.url, sim, Path(tmp) / "demo", lambda line: None, api="anthropic", model=script.MODEL
            )
            sent = await asyncio.to_thread(count_model_requests, sim)
            if await asyncio.to_thread(wait_for_analysis, cfg.db, demo, sent) < sent:
                raise SystemExit("the demo's calls were not all analysed")
            sessions.insert(0, (cfg.db, demo))
            rows = []
            for path, name in sessions:
                session = load_session(open_db(path), name)
                assert session is not None
                advice = advise(session)
                assert advice is not None
                v = await asyncio.to_thread(verify_advice, daemon.url, session, advice, daemon.sim_token)
                rows.append(
                    (
                        name if path != cfg.db else "demo",
                        advice.best.name,
                        v["predicted_saving_pct"],
                        v["simulated_saving_pct"],
                        v["error_pts"],
                    )
                )
                print(
                    f"{rows[-1][0]:<16} best {advice.best.name:<8} predicted {v['predicted_saving_pct']:6.1f}%  "
                    f"simulated {v['simulated_saving_pct']:6.1f}%  error {v['error_pts']:.2f} pts"
                )
            cause_rows = await asyncio.to_thread(per_cause, Path(tmp), daemon.url, daemon.sim.control())
        finally:
            await daemon.stop()
    print_causes(cause_rows)
    errors = [r[4] for r in rows]
    print(f"worst error: {max(errors):.2f} pts")
    print(
        f"advisor: predicted saving {statistics.mean(r[2] for r in rows):.1f}%, simulated "
        f"{statistics.mean(r[3] for r in rows):.1f}%, error {statistics.mean(errors):.2f} pts "
        f"over {len(rows)} sessions"
    )


def _fixed_session(provider: str, cause: str, template: Session) -> Session:
    """The session re-sent without the cause: its own bodies (not the advisor's rewrite)."""
    rows = [
        {**_row(c), "body": body}
        for c, body in zip(template.calls, cases.bodies(provider, cause, fixed=True), strict=True)
    ]
    return build_session(template.id, rows, prices=template.prices)


def _row(call: Any) -> dict:
    return {
        "id": call.id,
        "seq": call.seq,
        "started_at": call.started_at,
        "api": call.api,
        "model": call.model,
        "thread": call.thread,
        "key_fingerprint": call.scope,
    }


def per_cause(tmp: Path, url: str, control: SimulatorControl) -> list[tuple]:
    out = []
    for provider in cases.PROVIDERS:
        for cause in cases.CAUSES:
            db = tmp / f"{provider}-{cause}.db"
            store(db, cases.exchanges(provider, cause, "sess"))
            session = load_session(open_db(db), "sess")
            assert session is not None
            advice = advise(session)
            assert advice is not None and advice.top is not None
            itself = cause != "billing_header"  # the header went to a third-party upstream
            sent = simulate(url, control, session, session.calls, AS_SENT, provider_itself=itself)
            fixed = _fixed_session(provider, cause, session)
            without = simulate(url, control, fixed, fixed.calls, AS_SENT, provider_itself=itself)
            removed = 100 * (sent["cost_usd"] - without["cost_usd"]) / sent["cost_usd"]
            v = verify_advice(url, session, advice, control.token)
            out.append((provider, cause, advice.top, removed, v))
    return out


def print_causes(rows: list[tuple]) -> None:
    print("per cause: top advice, predicted saving, simulated saving without the cause, --verify")
    for provider, cause, top, removed, v in rows:
        agrees = "agrees" if v["error_pts"] <= 5 else "DISAGREES"
        print(
            f"{provider:<9} {cause:<14} top {top.cause:<14} {top.pointer or '-':<26} predicted {top.saving_pct:5.1f}%  "
            f"without the cause {removed:5.1f}%  verify simulated {v['simulated_saving_pct']:5.1f}% "
            f"({v['error_pts']:.2f} pts, {agrees})"
        )
        print(f"          {top.change}")


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    asyncio.run(main())
