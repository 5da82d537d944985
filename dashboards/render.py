#!/usr/bin/env python3
"""Renders the Grafana dashboard's panels from a real Prometheus into a PNG.

Grafana is not packaged here, so the panels' own PromQL (dashboards/tollgate.json)
is read from Prometheus' HTTP API (/api/v1/query_range) over a time range and
drawn with matplotlib, one subplot per panel, in the dashboard's order.
Grafana's variables are given the values a user would pick: every rule and
domain, and a rate window of 4 scrape intervals.

    python3 dashboards/render.py --prometheus http://127.0.0.1:9090 \
        --start 1700000000 --end 1700000300 --rate-interval 8s --out dashboards/tollgate.png
"""

import argparse
import json
import math
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def query_range(prometheus, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise SystemExit(f"{expr}: {body}")
    return body["data"]["result"]


def legend(fmt, labels):
    out = fmt
    for key, value in labels.items():
        out = out.replace("{{" + key + "}}", value)
    return out.replace("{{", "").replace("}}", "") or "value"


def main():
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--prometheus", default="http://127.0.0.1:9090")
    args.add_argument("--dashboard", default="dashboards/tollgate.json")
    args.add_argument("--start", type=float, required=True)
    args.add_argument("--end", type=float, required=True)
    args.add_argument("--step", default="2s")
    args.add_argument("--rate-interval", default="8s")
    args.add_argument("--out", default="dashboards/tollgate.png")
    a = args.parse_args()

    dashboard = json.load(open(a.dashboard))
    panels = [p for p in dashboard["panels"] if p.get("targets")]
    columns = 3
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7 * columns, 3.4 * rows))
    empty = []
    for ax, panel in zip(axes.flat, panels):
        drawn = 0
        for target in panel["targets"]:
            expr = (
                target["expr"]
                .replace("$__rate_interval", a.rate_interval)
                .replace("$rule", ".*")
                .replace("$domain", ".*")
            )
            for series in query_range(a.prometheus, expr, a.start, a.end, a.step):
                times = [float(t) - a.start for t, _ in series["values"]]
                values = [float(v) for _, v in series["values"]]
                ax.plot(times, values, label=legend(target.get("legendFormat", ""), series["metric"]))
                drawn += 1
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        ax.set_title(panel["title"], fontsize=10)
        ax.set_xlabel("seconds into the run", fontsize=8)
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=6, loc="upper left")
        else:
            empty.append(panel["title"])
            ax.text(0.5, 0.5, "no data in this run", ha="center", va="center", transform=ax.transAxes)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{dashboard['title']}: the dashboard's queries, read from Prometheus", fontsize=13)
    fig.tight_layout()
    fig.savefig(a.out, dpi=80)
    print(f"{a.out}: {len(panels)} panels, empty: {empty}")


if __name__ == "__main__":
    main()
