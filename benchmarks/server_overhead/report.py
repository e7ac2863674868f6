"""The Markdown report and the ``--json`` figures of server_overhead's measure.py, and the
targets they are judged by."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

import numpy as np
from closed_loop import CEILING_ROWS, CONCURRENCY, Cell
from machine import heading  # benchmarks/machine.py

PACKAGES = (
    *("sharedserve", "tensorflow", "torch", "grpcio", "protobuf"),
    *("fastapi", "starlette", "uvicorn", "httptools", "uvloop", "numpy", "orjson", "pysimdjson"),
)
DECODE_FIELDS = ("bytes", "parse_s", "to_numpy_s", "direct_parse_s", "direct_to_numpy_s")


def _find(cells: list[Cell], model: str, path: str, batching: str, threads: int) -> Cell:
    key = (model, path, batching, threads)
    return next(c for c in cells if (c.model, c.path, c.batching, c.concurrency) == key)


def row_line(c: Cell, cells: list[Cell]) -> str:
    base = _find(cells, c.model, "in-process", "-", c.concurrency)
    overhead = "" if c is base else f"{c.p50_ms - base.p50_ms:+.2f}"
    per_call = "" if np.isnan(c.rows_per_call) else f"{c.rows_per_call:.1f}"
    return (
        f"| {c.model} | {c.path} | {c.batching} | {c.concurrency} | {c.p50_ms:.2f} | "
        f"{c.p99_ms:.2f} | {c.qps:.0f} | {c.n} | {overhead} | {per_call} |"
    )


def targets(cells: list[Cell]) -> list[dict[str, Any]]:
    """The targets that apply to the models measured: REST on ``tiny``, gRPC and batching on
    the image models. Each: what, the figure, the target, whether it was met."""
    found: list[dict[str, Any]] = []
    for model in dict.fromkeys(c.model for c in cells):
        base = _find(cells, model, "in-process", "-", 1).p50_ms
        path = "REST" if model == "tiny" else "gRPC"
        over = _find(cells, model, path, "off", 1).p50_ms - base
        note = ""
        if path == "gRPC":
            bare = _find(cells, model, "bare gRPC", "off", 1).p50_ms - base
            note = f"bare grpcio server {bare:+.2f} ms, sharedserve's share {over - bare:+.2f}"
        what = f"{path} p50 overhead, {model}, 1 client, batching off"
        found.append(
            {
                "what": what,
                "value": f"{over:.2f} ms",
                "target": "<= 1.0 ms",
                "met": bool(over <= 1.0),
            }
        )
        if note:
            found[-1]["note"] = note
        if model == "tiny":
            continue
        off, on = (_find(cells, model, "gRPC", b, max(CONCURRENCY)) for b in ("off", "on"))
        ratio = on.qps / off.qps
        found.append(
            {
                "what": f"batching on vs off, gRPC, {model}, {max(CONCURRENCY)} clients",
                "value": f"{ratio:.2f}x QPS ({on.qps:.0f} vs {off.qps:.0f}), p99 "
                f"{on.p99_ms:.1f} vs {off.p99_ms:.1f} ms",
                "target": ">= 1.5x QPS at no worse p99",
                "met": bool(ratio >= 1.5 and on.p99_ms <= off.p99_ms),
            }
        )
    return found


def _target_line(t: dict[str, Any]) -> str:
    note = f"; {t['note']}" if "note" in t else ""
    verdict = "PASS" if t["met"] else "MISS"
    return f"- **{verdict}** {t['what']}: {t['value']} (target {t['target']}{note})"


def _extras(cells: list[Cell], args: argparse.Namespace) -> list[str]:
    """Per image model: the REST decode share, and the batching ceiling beside the server."""
    lines = []
    for model, times in args.decode.items():
        if model == "tiny":
            continue
        rest = _find(cells, model, "REST", "off", 1).p50_ms
        binary = _find(cells, model, "OIP REST binary", "off", 1).p50_ms
        base = _find(cells, model, "in-process", "-", 1).p50_ms
        lines += [
            f"{model}, the Open Inference Protocol's binary tensor extension against TF "
            f"Serving's JSON body (same server, same run, 1 client, batching off): p50 "
            f"{binary:.1f} ms vs {rest:.1f} ms, overhead over the in-process call "
            f"**{binary - base:+.1f} ms vs {rest - base:+.1f} ms**.",
            "",
            f"{_decode_line(model, times)}; the direct decoder's is "
            f"**{100 * (times[3] + times[4]) * 1e3 / rest:.0f}%** of the REST p50 ({rest:.1f} ms, "
            "1 client, batching off), which it served.",
            "",
        ]
    head = "| model | in-process batch-8 call ms | ceiling rows/s | in-process 8 clients QPS "
    head += "| gRPC off QPS | gRPC on QPS | on / ceiling |"
    rows = []
    for model, (per_call, rows_s) in args.ceiling.items():
        n = max(CONCURRENCY)
        batch_1 = _find(cells, model, "in-process", "-", n).qps
        off, on = (_find(cells, model, "gRPC", b, n).qps for b in ("off", "on"))
        rows.append(
            f"| {model} | {per_call:.2f} | {rows_s:.0f} | {batch_1:.0f} | {off:.0f} | {on:.0f} | "
            f"{on / rows_s:.2f} |"
        )
    return [
        *lines,
        f"Batching ceiling: one in-process call of {CEILING_ROWS} rows, back to back; no "
        "server can serve more rows than this however little batching costs. Beside it what "
        f"the server reached over gRPC with {max(CONCURRENCY)} clients, batching off and on.",
        "",
        head,
        "|---" * (head.count("|") - 1) + "|",
        *rows,
        "",
    ]


def _decode_line(model: str, times: list[float]) -> str:
    size, parse, to_numpy, direct_parse, direct_to_numpy = times
    general, direct = (parse + to_numpy) * 1e3, (direct_parse + direct_to_numpy) * 1e3
    return (
        f"{model} REST JSON decode of the {size / 2**20:.1f} MiB body (`codec`, timed in the "
        f"in-process worker, median of 30, the two decoders interleaved): general path "
        f"(orjson, then numpy; before) parse {parse * 1e3:.1f} ms + to numpy "
        f"{to_numpy * 1e3:.1f} ms = {general:.1f} ms; direct (simdjson into numpy, "
        f"`json_arrays`; now) parse {direct_parse * 1e3:.1f} ms + to numpy "
        f"{direct_to_numpy * 1e3:.1f} ms = {direct:.1f} ms, **{general / direct:.1f}x** faster"
    )


def decode_report(args: argparse.Namespace) -> str:
    """``--decode-only``: the decode figures alone."""
    lines = [*heading("REST JSON decode: the general path and the direct decoder", PACKAGES), ""]
    for model, times in args.decode.items():
        lines += [_decode_line(model, times) + ".", ""]
    return "\n".join(lines)


def report(cells: list[Cell], args: argparse.Namespace) -> str:
    head = "| model | path | batching | clients | p50 ms | p99 ms | QPS | requests | p50 "
    head += "overhead ms | rows/model call |"
    lines = [
        *heading("Server overhead: REST and gRPC vs the in-process model call", PACKAGES),
        "",
        f"Framework `{args.framework}`. Batch 1, closed loop; each row is {args.duration:g} s of "
        f"requests measured in {args.rounds} slices alternating with the other paths "
        f"({args.warmup:g} s warm-up first, {args.rewarm:g} s before each later slice). Batching "
        f"on means `--enable-batching --max-batch-size {CEILING_ROWS} --batch-timeout-micros "
        f"{args.batch_timeout_micros}`. p50/p99 are "
        "exact (numpy percentiles of every request's latency); *p50 overhead* is the row's p50 "
        "minus the in-process p50 at the same client count; *rows/model call* is the mean batch "
        "the server ran while the row was measured (from its `/metrics`). *bare gRPC* is the "
        "floor: grpcio's synchronous server in the in-process worker, decoding `tensor_content` "
        "and calling the same backend in its own worker thread, with no validation, metrics, "
        "event loop or batching. The client threads share the machine's cores with the server.",
        "",
        head,
        "|---" * (head.count("|") - 1) + "|",
        *(row_line(c, cells) for c in cells),
        "",
        *_extras(cells, args),
    ]
    return "\n".join([*lines, "Targets:", "", *map(_target_line, targets(cells)), ""])


def figures(cells: list[Cell], args: argparse.Namespace) -> dict[str, Any]:
    """Everything measured, for ``--json``."""
    return {
        "framework": args.framework,
        "settings": {
            k: getattr(args, k)
            for k in ("duration", "rounds", "warmup", "rewarm", "batch_timeout_micros")
        },
        "cells": [
            {**asdict(c), "rows_per_call": None if np.isnan(c.rows_per_call) else c.rows_per_call}
            for c in cells
        ],
        "decode": {m: dict(zip(DECODE_FIELDS, v, strict=True)) for m, v in args.decode.items()},
        "ceiling": {
            m: {"rows": CEILING_ROWS, "call_ms": v[0], "rows_per_s": v[1]}
            for m, v in args.ceiling.items()
        },
        "targets": targets(cells),
    }
