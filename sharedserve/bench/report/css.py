"""The stylesheet of ``report.html``, inlined into the page so the report stays one file.

Sized for a 1280 px window: the content is at most 80rem wide, and each section puts its table and
its plot side by side, wrapping the plot below when the two do not fit. The print rules keep the
colours that carry meaning, repeat table headings on each page and keep a plot with its table.
"""

from __future__ import annotations

__all__ = ["CSS"]

CSS = """
:root {
  --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --head: #f6f8fa; --accent: #0969da;
  --warn: #bf8700; --good: #1a7f37; --good-bg: #dafbe1; --bad: #cf222e; --bad-bg: #ffebe9;
}
* { box-sizing: border-box; }
html { font-size: 15px; }
body {
  margin: 0; color: var(--ink); background: #fff; line-height: 1.45; overflow-wrap: break-word;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
}
main { max-width: 80rem; margin: 0 auto; padding: 1.25rem 2rem 3rem; }
h1 { font-size: 1.6rem; margin: 0 0 0.15rem; }
h2 {
  font-size: 1.2rem; margin: 1.75rem 0 0.6rem; padding-bottom: 0.25rem;
  border-bottom: 1px solid var(--line);
}
h3 { font-size: 1rem; margin: 0 0 0.4rem; }
.meta { color: var(--muted); margin: 0 0 1rem; }
.banner {
  background: var(--bad-bg); border: 2px solid var(--bad); border-radius: 6px;
  padding: 0.6rem 0.9rem; font-weight: 600;
}
.verdict {
  border: 1px solid var(--line); border-left: 6px solid var(--accent); border-radius: 8px;
  padding: 0.9rem 1.2rem 1rem; background: #fbfcfd;
}
.verdict.good { border-left-color: var(--good); }
.verdict.bad { border-left-color: var(--bad); }
.verdict h2 { font-size: 1.5rem; margin: 0 0 0.7rem; padding: 0; border: 0; }
.verdict.good h2 { color: var(--good); }
.verdict.bad h2 { color: var(--bad); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(15rem, 1fr)); gap: 0.75rem; }
.card {
  background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 0.55rem 0.8rem;
}
.card .label {
  font-size: 0.78rem; text-transform: uppercase; letter-spacing: 0.04em; color: var(--muted);
}
.card .value { font-size: 1.35rem; font-weight: 650; }
.card .detail { font-size: 0.92rem; }
.reason { margin: 0.7rem 0 0; color: var(--muted); font-size: 0.9rem; }
.pair { display: flex; flex-wrap: wrap; gap: 1.5rem; align-items: flex-start; }
.table { flex: 0 1 auto; max-width: 100%; overflow-x: auto; }
/* As narrow as the figures allow (headings wrap), leaving the plot beside it the room. */
.table table { width: min-content; }
figure { flex: 1 1 26rem; max-width: 750px; margin: 0; }
figure img {
  display: block; width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px;
}
.plots { display: flex; flex-wrap: wrap; gap: 1.5rem; }
table { border-collapse: collapse; font-size: 0.9rem; font-variant-numeric: tabular-nums; }
th, td {
  padding: 0.3rem 0.5rem; border-bottom: 1px solid var(--line); text-align: right;
  vertical-align: top;
}
thead th {
  background: var(--head); font-weight: 600; vertical-align: bottom;
  border-bottom: 2px solid var(--line);
}
td { white-space: nowrap; }
td.text, th.text { text-align: left; }
td.none { color: var(--muted); }
td.ok { color: var(--good); }
td.bad { color: var(--bad); font-weight: 600; }
tr.rec td { background: var(--good-bg); font-weight: 600; }
tr.miss td:first-child { box-shadow: inset 4px 0 var(--bad); }
tr.unreliable td:first-child { box-shadow: inset 4px 0 var(--warn); }
.tag {
  display: block; width: fit-content; margin-left: auto;
  font-size: 0.72rem; font-weight: 600; border: 1px solid currentColor; border-radius: 3px;
  padding: 0 0.25rem; text-transform: uppercase;
}
ul { padding-left: 1.25rem; }
li { margin: 0.25rem 0; }
.context { display: grid; grid-template-columns: 1fr 1fr; gap: 1.5rem; margin-top: 1.75rem; }
.pairs { width: 100%; font-size: 0.85rem; }
.pairs th { text-align: left; color: var(--muted); font-weight: 600; white-space: nowrap; }
.pairs td { text-align: left; white-space: normal; overflow-wrap: anywhere; }
@media (max-width: 60rem) {
  main { padding: 1rem; }
  .context { grid-template-columns: 1fr; }
}
@media print {
  @page { margin: 14mm; }
  html { font-size: 9.5pt; }
  main { max-width: none; padding: 0; }
  .verdict, .card, .banner, tr.rec td, td.bad, td.ok, tr.miss td:first-child,
  tr.unreliable td:first-child {
    -webkit-print-color-adjust: exact; print-color-adjust: exact;
  }
  .verdict, .pair, figure, tr { break-inside: avoid; }
  h2 { break-after: avoid; }
  thead { display: table-header-group; }
  .table { overflow: visible; }
  figure { flex-basis: 22rem; }
  .context { grid-template-columns: 1fr; }
}
"""
