"""Replay the attacker's probe against a real ``ctxscope serve``: every case attacks the daemon the way
the probe did and says whether the daemon held.

Run from the repository: ``.venv/bin/python bench/abuse.py [--only NAME[,NAME]]``. Everything goes
to 127.0.0.1: the daemon (port 0, a temporary CTXSCOPE_HOME and --db, small limits from a config
file), loopback upstreams, and a background client that calls through the proxy every 10 ms for
the whole run (its longest wait is the forwarding stall). After the cases the daemon is stopped
gracefully and the store is checked: outcomes, secrets, and that every legit call is there.

The last line: ``abuse: N cases, held N, lost calls 0, max RSS X MB, max forwarding stall Y ms``.
Exit status 1 if a case failed or a legit call was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent / "abuse_probe"))  # the probe's own modules
sys.path.insert(0, str(Path(__file__).resolve().parent / "proxy_probe"))  # the proxy bench's process helpers

import abuse_cases_keys as keys
import abuse_cases_limits as limits
import abuse_cases_outcomes as outcomes
import abuse_cases_plane as plane
import abuse_cases_remote as remote
import abuse_cases_tunnels as tunnels
from abuse_ctx import Case, Ctx, Limits, Result, Stored, read_calls, row_tag
from abuse_procs import Background, RssSampler, env_for, start_daemon, stop_daemon
from abuse_upstreams import Upstreams

CASES = [
    Case("cross_origin_script", plane.cross_origin_script, 20),
    Case("dns_rebinding_read", plane.dns_rebinding_read, 20),
    Case("planted_spool", plane.planted_spool, 60),
    Case("file_modes", plane.file_modes, 20),
    Case("slowloris_headers", limits.slowloris_headers, 15),
    Case("slow_body", limits.slow_body, 15),
    Case("idle_keepalive", limits.idle_keepalive, 20),
    Case("sim_50mb_stall", limits.sim_50mb_stall, 150),
    Case("sim_20mb_rss", limits.sim_20mb_rss, 150),
    Case("gzip_bomb", limits.gzip_bomb, 120, prepare=limits.build_bomb),
    Case("over_limit_body", limits.over_limit_body, 150),
    Case("client_leaves_silent_upstream", outcomes.client_leaves_silent_upstream, 15),
    Case("reset_close_delimited", outcomes.reset_close_delimited, 20),
    Case("dotdot_escape", plane.dotdot_escape, 20),
    Case("upstream_html_csp", plane.upstream_html_csp, 15),
    Case("credential_redaction", plane.credential_redaction, 20),
    Case("client_disconnect_mid_body", outcomes.client_disconnect_mid_body, 15),
    Case("disk_full", outcomes.disk_full, 150),
    Case("remote_without_key", remote.remote_without_key, 60),
    Case("rebinding_provider_route", remote.rebinding_provider_route, 40),
    Case("cross_site_simple_post", remote.cross_site_simple_post, 40),
    Case("escape_label", remote.escape_label, 90),
    Case("otlp_huge_error_body", remote.otlp_huge_error_body, 120),
    Case("replay_host_key", keys.replay_host_key, 90),
    Case("launcher_impostor", keys.launcher_impostor, 60),
    Case("import_foreign_host", keys.import_foreign_host, 60),
    Case("import_zstd_bomb", keys.import_zstd_bomb, 120),
    Case("home_mode", keys.home_mode, 30),
    Case("tls_handshake_race", tunnels.tls_handshake_race, 90),
    Case("tunnel_fd_leak", tunnels.tunnel_fd_leak, 90),
    Case("tunnel_max_connections", tunnels.tunnel_max_connections, 90),
    Case("tunnel_idle_and_trickle", tunnels.tunnel_idle_and_trickle, 40),
    Case("pending_tunnel_500mb", tunnels.pending_tunnel_500mb, 60),
    Case("ca_rotation_bundle", tunnels.ca_rotation_bundle, 90),
]
RUN_BUDGET = 600.0  # seconds for all cases together: what is left after it is not run


def log(text: str) -> None:
    print(f"[abuse {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def pick(only: list[str]) -> list[Case]:
    names = {n.strip() for group in only for n in group.split(",") if n.strip()}
    unknown = names - {c.name for c in CASES}
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; cases: {', '.join(c.name for c in CASES)}")
    return [c for c in CASES if not names or c.name in names]


async def start_main(ctx: Ctx, upstreams: dict[str, str], config: Path) -> None:
    ctx.daemon = await asyncio.to_thread(start_daemon, "serve", ctx.work, ctx.home, ctx.db, upstreams, config)


async def run_case(ctx: Ctx, case: Case, deadline: float) -> Result:
    if time.monotonic() > deadline:
        return Result(False, "not run: the bench's time budget was used up")
    if ctx.daemon.proc.poll() is not None:
        return Result(False, f"the daemon is gone (exit {ctx.daemon.proc.returncode})")
    try:
        return await asyncio.wait_for(case.run(ctx), case.budget)
    except TimeoutError:
        return Result(False, f"did not finish within {case.budget:g} s")
    except Exception as exc:  # a case that errors fails; the run goes on
        log(traceback.format_exc())
        return Result(False, f"error: {exc!r}"[:300])


def settle(result: Result, stored: Stored | None) -> tuple[str, str]:
    """The case's final word: its own result and, if it has one, the store's."""
    if result.held is None:
        return "skipped", result.detail
    held, detail = result.held, result.detail
    if result.later is not None:
        if stored is None:
            held, detail = False, detail + "; store unreadable"
        else:
            try:
                ok, more = result.later(stored)
            except Exception as exc:
                ok, more = False, f"store check error: {exc!r}"[:200]
            held, detail = held and ok, f"{detail}; {more}"
    return ("held" if held else "FAILED"), detail


async def main(args: argparse.Namespace) -> int:
    cases = pick(args.only)
    work = Path(tempfile.mkdtemp(prefix="ctxscope-abuse-"))
    (work / "data").mkdir(mode=0o700)
    lim = Limits()
    config = work / "ctxscope.toml"
    config.write_text(lim.toml())
    up = Upstreams()
    await up.start()
    bg = Background(env_for(work / "home-bg"))
    ctx = Ctx(
        work=work, limits=lim, home=work / "home", db=work / "data" / "captures.db", up=up, bg=bg, sampler=RssSampler()
    )
    results: dict[str, Result] = {}
    stored, t_cases = None, float("inf")
    try:
        for case in cases:
            if case.prepare is not None:
                await case.prepare(ctx)
        upstreams = {"fast": bg.upstream, "anthropic": bg.upstream, "openai": bg.upstream, **up.urls()}
        await start_main(ctx, upstreams, config)
        log(f"daemon {ctx.daemon.pid} on {ctx.url}, work dir {work}")
        ctx.sampler.roots.append(ctx.daemon.pid)
        ctx.sampler.start()
        ctx.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        bg.go(ctx.url)
        await asyncio.sleep(1.5)
        t_cases = time.monotonic()  # the first calls warm the daemon up: the stall counts from here
        deadline = t_cases + RUN_BUDGET
        for case in cases:
            log(f"case {case.name} ...")
            results[case.name] = await run_case(ctx, case, deadline)
            log(f"case {case.name}: {results[case.name].held} {results[case.name].detail}")
        bg.stop_client()
        log(f"stopping the daemon: {await asyncio.to_thread(stop_daemon, ctx.daemon, 180)}")
        try:
            stored = Stored(await asyncio.to_thread(read_calls, ctx.db))
        except Exception as exc:
            ctx.notes.append(f"cannot read the store: {exc!r}")
    finally:
        if ctx.session is not None:
            await ctx.session.close()
        for daemon in [ctx.daemon, *ctx.others]:
            if daemon is not None and daemon.proc.poll() is None:
                stop_daemon(daemon, 30)
        ctx.sampler.stop()
        bg.close()
        await up.close()

    have = {row_tag(r) for r in stored.rows} if stored else set()
    wanted = set(bg.tags()) | ctx.expected
    lost = len(wanted - have) + ctx.lost_elsewhere
    lat = sorted(s.latency_ms for s in bg.samples if s.start >= t_cases)
    unanswered = sum(1 for s in bg.samples if s.status == 0)
    warm = max((s.latency_ms for s in bg.samples if s.start < t_cases), default=0.0)
    for note in ctx.notes:
        print(f"note: {note}")
    if lat:
        print(
            f"note: background client during the cases: {len(lat)} calls, {unanswered} unanswered, median "
            f"{statistics.median(lat):.1f} ms, p99 {lat[int(len(lat) * 0.99)]:.1f} ms, max {lat[-1]:.0f} ms "
            f"(warm-up before the cases: max {warm:.0f} ms)"
        )
    if ctx.daemon is not None:
        tracebacks = ctx.daemon.err_since(0).count("Traceback")
        print(f"note: the daemon's stderr holds {tracebacks} traceback{'s' * (tracebacks != 1)}")
    if wanted - have:
        print(
            f"note: legit calls missing from the store: {', '.join(sorted(wanted - have)[:10])}"
            f"{' ...' if len(wanted - have) > 10 else ''}"
        )
    ran = held = 0
    for case in cases:
        verdict, detail = settle(results.get(case.name, Result(False, "not run")), stored)
        print(f"case {case.name}: {verdict} ({detail})")
        if verdict != "skipped":
            ran += 1
            held += verdict == "held"
    print(
        f"abuse: {ran} cases, held {held}, lost calls {lost}, max RSS {ctx.sampler.peak_total_kb / 1024:.0f} MB, "
        f"max forwarding stall {bg.max_stall(t_cases):.0f} ms"
    )
    if args.keep:
        log(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if held < ran or lost else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help="run only these cases: " + ", ".join(c.name for c in CASES),
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, database)")
    sys.exit(asyncio.run(main(parser.parse_args())))
