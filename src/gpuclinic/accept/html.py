"""``accept --html FILE``: one self-contained page (inline CSS and SVG, no scripts, no external
assets) with the scorecard and plots of clocks, temperature and throughput over the burn.

Why no JavaScript: the file is mailed to a provider or attached to a ticket and must render the
same anywhere, including offline.  Each plot carries data-* attributes so a test can read what
was drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from gpuclinic.accept.model import BurnSeries, Scorecard
from gpuclinic.accept.render import fmt_value, header_lines, rows, summary_line

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
W, H, PAD = 560, 220, 40

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 6px} .meta{color:#555;margin:2px 0}
.verdict{font-size:18px;font-weight:600;margin:12px 0;padding:8px 12px;border-radius:6px;display:inline-block}
.v-pass{background:#e3f5e1}.v-warn{background:#fff3cd}.v-fail{background:#f8d7da}.v-could{background:#eee}
table{border-collapse:collapse;margin:12px 0;font-size:13px}
td,th{padding:3px 8px;border-bottom:1px solid #e5e5e5;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.s-fail td:first-child{color:#b00020;font-weight:700}
tr.s-warn td:first-child{color:#9a6700;font-weight:700}
tr.s-pass td:first-child{color:#1a7f37} tr.s-skipped td{color:#777}
.plots{display:flex;flex-wrap:wrap;gap:16px} figure{margin:0} figcaption{font-weight:600;margin-bottom:4px}
svg{background:#fafafa;border:1px solid #ddd} .legend span{margin-right:10px;font-size:12px}
"""


def _poly(xs: list[float], ys: Sequence[float | None], x0: float, x1: float, y0: float, y1: float) -> str:
    pts = []
    for x, y in zip(xs, ys, strict=False):
        if y is None:
            continue
        px = PAD + (x - x0) / (x1 - x0 or 1) * (W - 2 * PAD)
        py = H - PAD - (y - y0) / (y1 - y0 or 1) * (H - 2 * PAD)
        pts.append(f"{px:.1f},{py:.1f}")
    return " ".join(pts)


def plot(
    metric: str,
    title: str,
    unit: str,
    series: list[BurnSeries],
    ref: float | None = None,
    ref_label: str = "",
) -> str:
    """One SVG line chart, a line per GPU, optional dashed reference line (e.g. slowdown temperature)."""
    lines: list[tuple[str, list[float], list[float | None]]] = []
    for s in series:
        ys: list[float | None]
        if metric == "tflops":
            xs, ys = list(s.tflops_t), [float(v) for v in s.tflops]
        else:
            xs, ys = list(s.t), list(getattr(s, metric))
        if any(y is not None for y in ys):
            lines.append((s.gpu, xs, ys))
    vals = [y for _, _, yl in lines for y in yl if y is not None]
    allx = [x for _, xl, _ in lines for x in xl]
    npts = sum(len([y for y in yl if y is not None]) for _, _, yl in lines)
    if not vals:
        return (
            f'<figure><figcaption>{escape(title)}</figcaption><svg data-metric="{metric}" data-series="0" '
            f'data-points="0" width="{W}" height="{H}"><text x="20" y="40">no samples</text></svg></figure>'
        )
    lo, hi = min(vals + ([ref] if ref else [])), max(vals + ([ref] if ref else []))
    span = hi - lo or max(1.0, abs(hi) * 0.1)
    lo, hi = lo - span * 0.08, hi + span * 0.08
    x0, x1 = min(allx), max(allx) if max(allx) > min(allx) else min(allx) + 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'data-metric="{metric}" data-series="{len(lines)}" data-points="{npts}" data-min="{min(vals):g}" '
        f'data-max="{max(vals):g}" data-ref="{ref if ref is not None else ""}">'
    ]
    parts.append(
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#999"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#999"/>'
    )
    for frac in (0.0, 0.5, 1.0):
        v = lo + (hi - lo) * frac
        y = H - PAD - frac * (H - 2 * PAD)
        parts.append(
            f'<text x="{PAD - 4}" y="{y + 4:.0f}" font-size="10" text-anchor="end">{fmt_value(v)}</text>'
        )
    parts.append(
        f'<text x="{W - PAD}" y="{H - PAD + 16}" font-size="10" text-anchor="end">{x1:.0f} s</text>'
        f'<text x="{PAD}" y="{H - PAD + 16}" font-size="10">{x0:.0f} s</text>'
        f'<text x="{PAD}" y="{PAD - 8}" font-size="11">{escape(unit)}</text>'
    )
    if ref is not None:
        y = H - PAD - (ref - lo) / (hi - lo) * (H - 2 * PAD)
        parts.append(
            f'<line class="ref" x1="{PAD}" y1="{y:.1f}" x2="{W - PAD}" y2="{y:.1f}" stroke="#b00020" '
            f'stroke-dasharray="5,4"/><text x="{W - PAD}" y="{y - 4:.1f}" font-size="10" fill="#b00020" '
            f'text-anchor="end">{escape(ref_label)}</text>'
        )
    for k, (gpu, xs, ys) in enumerate(lines):
        parts.append(
            f'<polyline data-gpu="{escape(gpu)}" fill="none" stroke-width="1.6" '
            f'stroke="{COLORS[k % len(COLORS)]}" points="{_poly(xs, ys, x0, x1, lo, hi)}"/>'
        )
    parts.append("</svg>")
    legend = "".join(
        f'<span style="color:{COLORS[k % len(COLORS)]}">&#9632; GPU {escape(g)}</span>'
        for k, (g, _, _) in enumerate(lines)
    )
    cap = f"<figcaption>{escape(title)}</figcaption>"
    return f'<figure>{cap}{"".join(parts)}<div class="legend">{legend}</div></figure>'


def render_html(sc: Scorecard) -> str:
    s = sc.summary()
    vclass = "v-" + s["verdict"].split()[0]
    head = header_lines(sc)
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>{escape(head[0])}</title><style>{CSS}</style></head>",
        f'<body data-items="{len(sc.items)}" data-verdict="{escape(s["verdict"])}" '
        f'data-plots="{4 if sc.burn else 0}">',
        f"<h1>{escape(head[0])}</h1>",
    ]
    out += [f'<p class="meta">{escape(x)}</p>' for x in head[1:]]
    out.append(f'<div class="verdict {vclass}" id="verdict">{escape(summary_line(sc))}</div>')
    if sc.burn:
        slow = [x.slowdown_temp_c for x in sc.burn if x.slowdown_temp_c]
        out.append('<h2>Burn</h2><div class="plots">')
        out.append(plot("sm_clock_mhz", "SM clock over the burn", "MHz", sc.burn))
        out.append(
            plot(
                "temperature_c",
                "GPU temperature over the burn",
                "°C",
                sc.burn,
                min(slow) if slow else None,
                f"slowdown {min(slow):g} °C" if slow else "",
            )
        )
        out.append(plot("power_w", "Power over the burn", "W", sc.burn))
        out.append(plot("tflops", "Matmul throughput over the burn", "TFLOPS", sc.burn))
        out.append("</div>")
    out.append(
        "<h2>Scorecard</h2><table><thead><tr>"
        + "".join(
            f"<th>{h}</th>" for h in ["status", "item", "gpu", "measured", "expected", "unit", "basis / why"]
        )
        + "</tr></thead><tbody>"
    )
    for it, r in zip(sc.items, rows(sc), strict=True):
        cells = "".join(f"<td{' class=num' if i in (3, 4) else ''}>{escape(c)}</td>" for i, c in enumerate(r))
        out.append(
            f'<tr class="s-{it.status}" data-id="{escape(it.id)}" data-gpu="{escape(it.gpu or "")}" '
            f'data-status="{it.status}" title="{escape(it.source)}">{cells}</tr>'
        )
    out.append("</tbody></table>")
    out += [f'<p class="meta">note: {escape(n)}</p>' for n in sc.notes]
    out.append("</body></html>")
    return "\n".join(out)
