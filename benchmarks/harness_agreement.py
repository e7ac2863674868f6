"""Do our own numbers agree with an independent load generator's? bench vs wrk vs hey.

One real ``sharedserve serve`` process (``--model``, built with random weights into a temp dir),
driven closed loop at the same concurrency for the same time by three harnesses in turn, on two
paths: TF Serving's REST predict with a JSON body, and the Open Inference Protocol's REST infer
with binary tensors both ways. Every harness sends the same bytes: the body ``sharedserve bench``
builds for that path (``sharedserve.bench.payload``), written to a file for the other two.

* ``bench``: ``sharedserve bench --targets`` (Locust users, ``--pattern parallel``), its exact
  p99 from its own histogram of every request in the measured window;
* ``wrk``: ``-t 1 -c N``; QPS and p99 from its ``done()`` hook (its HDR histogram, microseconds);
* ``hey``: ``-c N -z D -o csv``; QPS and an exact p99 (numpy) over every request's time.

wrk and hey have no warm-up of their own: each first runs ``--warmup`` seconds unmeasured. The
harnesses run in turn, not at once, so each has the server to itself; on a small machine each
also shares the cores with the server, which is part of what is compared. ``--rounds`` repeats
the three with the order reversed every other round, so that a server which drifts over the run
does not pass for a harness that disagrees; a harness's figures are the means over its rounds.
Needs ``wrk`` and ``hey`` (Debian packages: ``apt-get install wrk hey``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

# server_overhead/, for its clients.py (which starts the server the way it measures one)
sys.path.insert(0, str(Path(__file__).resolve().parent / "server_overhead"))

from clients import serving
from machine import heading, publish  # benchmarks/machine.py, beside this script

from sharedserve.bench.payload import oip_rest_request, random_inputs, rest_body, signature_inputs

PACKAGES = ("sharedserve", "tensorflow", "locust", "uvicorn", "numpy")
AGREE = 0.10  # the bar: the harnesses measure the same thing

WRK_SCRIPT = """
local f = assert(io.open("{body}", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
{headers}
function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.status + summary.errors.timeout
  io.write(string.format('WRK {{"requests": %d, "duration_us": %d, "p99_us": %d, "errors": %d}}\\n',
    summary.requests, summary.duration, latency:percentile(99.0), errors))
end
"""


def bodies(rest: str, model: str) -> dict[str, tuple[str, bytes, dict[str, str]]]:
    """Path name -> (URL path, body, headers), the bytes the bench itself sends."""
    with urllib.request.urlopen(f"{rest}/v1/models/{model}/metadata") as response:
        arrays = random_inputs(signature_inputs(json.load(response)), seed=0)
    oip, oip_headers = oip_rest_request(arrays)
    return {
        "rest": (
            f"/v1/models/{model}:predict",
            rest_body(arrays),
            {"Content-Type": "application/json"},
        ),
        "oip-rest": (f"/v2/models/{model}/infer", oip, oip_headers),
    }


def run_bench(rest: str, model: str, protocol: str, args: argparse.Namespace, tmp: Path) -> Any:
    targets = tmp / "targets.json"
    targets.write_text(json.dumps({"targets": [{"name": "m-0", "model": model, "rest": rest}]}))
    out = tmp / f"bench-{protocol}"
    command = [sys.executable, "-m", "sharedserve", "bench", "--targets", str(targets)]
    command += ["--pattern", "parallel", "--concurrency", str(args.concurrency)]
    command += ["--duration", str(args.duration), "--warmup", str(args.warmup)]
    command += ["--stability-windows", "1", "--protocol", protocol, "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True)
    (row,) = json.loads((out / "report.json").read_text())["rows"]
    return {"qps": row["qps"], "p99_ms": row["p99_ms"], "requests": row["requests"],
            "errors": row["errors"], "cpu": row["loadgen_cpu_util"]}  # fmt: skip


def run_wrk(url: str, body: Path, headers: dict[str, str], args: argparse.Namespace) -> Any:
    script = body.with_suffix(".lua")
    lines = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items())
    script.write_text(WRK_SCRIPT.format(body=body, headers=lines))
    base = ["wrk", "-t", "1", "-c", str(args.concurrency), "--timeout", "60s", "-s", str(script)]
    subprocess.run([*base, "-d", f"{args.warmup:g}s", url], check=True, capture_output=True)
    before = _children_cpu()
    done = subprocess.run([*base, "-d", f"{args.duration:g}s", url], check=True,
                          capture_output=True, text=True)  # fmt: skip
    cpu = (_children_cpu() - before) / args.duration
    line = next(x for x in done.stdout.splitlines() if x.startswith("WRK "))
    got = json.loads(line[4:])
    return {"qps": got["requests"] / (got["duration_us"] / 1e6), "p99_ms": got["p99_us"] / 1e3,
            "requests": got["requests"], "errors": got["errors"], "cpu": cpu}  # fmt: skip


def run_hey(url: str, body: Path, headers: dict[str, str], args: argparse.Namespace) -> Any:
    base = ["hey", "-c", str(args.concurrency), "-m", "POST", "-D", str(body)]
    base += ["-T", headers["Content-Type"], "-t", "60"]
    for key, value in headers.items():
        if key != "Content-Type":
            base += ["-H", f"{key}: {value}"]
    subprocess.run([*base, "-z", f"{args.warmup:g}s", url], check=True, capture_output=True)
    before = _children_cpu()
    done = subprocess.run([*base, "-z", f"{args.duration:g}s", "-o", "csv", url], check=True,
                          capture_output=True, text=True)  # fmt: skip
    cpu = (_children_cpu() - before) / args.duration
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    ok = [float(r["response-time"]) for r in rows if r["status-code"] == "200"]
    return {"qps": len(ok) / args.duration, "p99_ms": float(np.percentile(ok, 99)) * 1e3,
            "requests": len(rows), "errors": len(rows) - len(ok), "cpu": cpu}  # fmt: skip


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (wrk, hey), user and system."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def mean(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "qps": float(np.mean([r["qps"] for r in rounds])),
        "p99_ms": float(np.mean([r["p99_ms"] for r in rounds])),
        "requests": sum(r["requests"] for r in rounds),
        "errors": sum(r["errors"] for r in rounds),
        "cpu": float(np.mean([r["cpu"] for r in rounds])),
        "rounds": [(round(r["qps"], 1), round(r["p99_ms"], 1)) for r in rounds],
    }


def tool_versions() -> str:
    """The Debian packages' versions of wrk and hey (hey has no --version)."""
    found = []
    for tool in ("wrk", "hey"):
        query = ["dpkg-query", "-W", "-f", "${Version}", tool]
        done = subprocess.run(query, capture_output=True, text=True, check=False)
        found.append(f"{tool} {done.stdout.strip() if done.returncode == 0 else '(not from dpkg)'}")
    return "- Load generators: " + ", ".join(found)


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    lines = heading("Harness agreement: sharedserve bench vs wrk vs hey", PACKAGES)
    lines += [
        tool_versions(),
        "",
        f"Model `{args.model}` (random weights), one `sharedserve serve` process, batching off. "
        f"Closed loop, {args.concurrency} connections, {args.duration:g} s measured after "
        f"{args.warmup:g} s unmeasured, one harness at a time, {args.rounds} rounds in "
        "alternating order (bench, wrk, hey; then hey, wrk, bench); QPS and p99 are the means "
        "of the rounds, listed as (QPS, p99) in *rounds*. `rest` is TF Serving's JSON "
        "predict; `oip-rest` is the Open Inference Protocol's infer with binary tensors both "
        "ways. Every harness sends the bench's own body. *vs bench* is the harness's figure "
        f"over the bench's; within ±{AGREE:.0%} counts as agreeing. *harness CPU cores* is "
        "what the load generator itself used while measuring, on the cores the server uses too: "
        "the bench's own figure (`loadgen_cpu_util`), wrk's and hey's from the operating "
        "system's accounting of the finished process.",
        "",
        "| path | harness | QPS | p99 ms | requests | errors | QPS vs bench | p99 vs bench "
        "| harness CPU cores | rounds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path, by_tool in results.items():
        bench = by_tool["bench"]
        for tool, got in by_tool.items():
            q, p = got["qps"] / bench["qps"], got["p99_ms"] / bench["p99_ms"]
            cells = ("", "") if tool == "bench" else (f"{q:.2f}", f"{p:.2f}")
            lines.append(
                f"| {path} | {tool} | {got['qps']:.1f} | {got['p99_ms']:.1f} | "
                f"{got['requests']} | {got['errors']} | {cells[0]} | {cells[1]} | "
                f"{got['cpu']:.2f} | {', '.join(f'({q:g}, {p:g})' for q, p in got['rounds'])} |"
            )
    verdicts = []
    for path, by_tool in results.items():
        bench = by_tool["bench"]
        for tool in ("wrk", "hey"):
            got = by_tool[tool]
            worst = max(
                abs(got["qps"] / bench["qps"] - 1), abs(got["p99_ms"] / bench["p99_ms"] - 1)
            )
            verdict = "agrees" if worst <= AGREE else "DISAGREES"
            verdicts.append(f"- {path}, {tool}: {verdict} (largest difference {worst:.0%})")
    return "\n".join([*lines, "", *verdicts, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the Markdown report here")
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--rounds", type=int, default=4, help="runs of each harness per path")
    args = parser.parse_args()
    missing = [tool for tool in ("wrk", "hey") if shutil.which(tool) is None]
    if missing:
        parser.error(f"{' and '.join(missing)} not found: apt-get install {' '.join(missing)}")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="sharedserve-harness-") as name:
        tmp = Path(name)
        build = [sys.executable, "-m", "sharedserve", "models", "build", args.model]
        subprocess.run([*build, "--out", str(tmp / "models")], check=True, capture_output=True)
        with serving(tmp / "models" / args.model, [], tmp / "server.log") as (port, _):
            rest = f"http://127.0.0.1:{port}"
            for path, (url_path, body, headers) in bodies(rest, args.model).items():
                body_file = tmp / f"{path}.body"
                body_file.write_bytes(body)
                url = rest + url_path
                runs: dict[str, Any] = {
                    "bench": partial(run_bench, rest, args.model, path, args, tmp),
                    "wrk": partial(run_wrk, url, body_file, headers, args),
                    "hey": partial(run_hey, url, body_file, headers, args),
                }
                rounds: dict[str, list[Any]] = {tool: [] for tool in runs}
                for i in range(args.rounds):
                    for tool in list(runs)[:: -1 if i % 2 else 1]:
                        rounds[tool].append(runs[tool]())
                        print(path, tool, json.dumps(rounds[tool][-1]), flush=True)
                results[path] = {tool: mean(got) for tool, got in rounds.items()}
    publish(report(results, args), args.out)


if __name__ == "__main__":
    main()
