// Checks that every metric the Grafana dashboard queries exists in a scrape
// of tally's /metrics. Histogram names match through their _bucket, _sum and
// _count series, because that is what appears in the exposition.
// Usage: node dashboard.mjs --scrape=FILE [--dashboard=FILE]
//        [--gpu-optional]   GPU-only families may be absent (a CPU server
//                           creates their series only when a GPU works)
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=")).map(([k, ...v]) => [k, v.join("=") || true]));

// Families recorded only by the CUDA engine.
const GPU_ONLY = new Set([
  "tally_host_to_device_bytes_total", "tally_host_to_device_seconds_total",
  "tally_kernel_seconds_total", "tally_device_memory_used_bytes",
  "tally_device_memory_capacity_bytes", "tally_device_serving",
]);
const KEYWORDS = new Set(["by", "without", "on", "ignoring", "group_left", "group_right",
  "bool", "and", "or", "unless", "offset", "inf", "nan"]);

// Metric names referenced by one PromQL expression.
export function metricNames(expr) {
  let s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""') // strings
    .replace(/\$\{?\w+\}?/g, "1")                                  // $__rate_interval etc.
    .replace(/\{[^}]*\}/g, "")                                     // label matchers
    .replace(/\[[^\]]*\]/g, "")                                    // ranges
    .replace(/(?<![\w.])\d+(?:\.\d*)?(?:[eE][+-]?\d+)?/g, "0");     // numbers: 1e-3
  // Label lists of by/without/on/ignoring/group_*.
  s = s.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ");
  const names = new Set();
  for (const m of s.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const rest = s.slice(m.index + m[0].length);
    if (/^\s*\(/.test(rest)) continue;             // function or aggregation
    if (KEYWORDS.has(m[0].toLowerCase())) continue;
    names.add(m[0]);
  }
  return [...names];
}

function exprsOf(dashboard) {
  const out = [];
  const walk = (x) => {
    if (Array.isArray(x)) return x.forEach(walk);
    if (!x || typeof x !== "object") return;
    if (typeof x.expr === "string") out.push(x.expr);
    if (x.type === "query" && typeof x.definition === "string") out.push(x.definition.replace(/^label_values\((.*),\s*\w+\)$/, "$1"));
    Object.values(x).forEach(walk);
  };
  walk(dashboard);
  return out;
}

export function seriesNames(scrape) {
  const names = new Set();
  for (const line of scrape.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/.exec(line);
    if (m) names.add(m[1]);
  }
  return names;
}

// Label names each series name carries in a scrape.
export function seriesLabels(scrape) {
  const labels = new Map();
  for (const line of scrape.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? /.exec(line);
    if (!m) continue;
    const set = labels.get(m[1]) ?? new Set();
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) set.add(l[1]);
    labels.set(m[1], set);
  }
  return labels;
}

// Labels Prometheus adds when it scrapes (target and series labels), which no
// tally scrape shows.
export const SCRAPE_LABELS = new Set(["pod", "namespace", "instance", "job", "service", "container", "endpoint"]);

// Labels an expression groups by (by/on/group_*), when none of the metrics it
// queries has them: a panel that would show one line per nothing.
export function unknownLabels(exprs, labels, optional = new Set()) {
  const out = [];
  for (const e of exprs) {
    const names = metricNames(e).filter((n) => !optional.has(n) || labels.has(n));
    if (names.length === 0) continue;
    const stripped = e.replace(/"(?:[^"\\]|\\.)*"/g, '""');
    for (const g of stripped.matchAll(/\b(?:by|on|group_left|group_right)\s*\(([^)]*)\)/g)) {
      for (const l of g[1].split(",").map((x) => x.trim()).filter(Boolean)) {
        if (SCRAPE_LABELS.has(l)) continue;
        if (!names.some((n) => labels.get(n)?.has(l))) out.push(`${l} (in: ${e})`);
      }
    }
  }
  return out;
}

export function missing(exprs, series, optional = new Set()) {
  const out = [];
  for (const e of exprs) {
    for (const n of metricNames(e)) {
      if (!series.has(n) && !optional.has(n)) out.push(`${n} (in: ${e})`);
    }
  }
  return out;
}

function main() {
  let failures = 0;
  const fail = (m) => { failures++; console.log(`FAIL ${m}`); };
  // Self-test: the extractor finds what it must and the check can fail.
  const cases = [
    ['histogram_quantile(0.99, sum by (le, method) (rate(tally_request_duration_seconds_bucket{code!="OK"}[$__rate_interval])))', ["tally_request_duration_seconds_bucket"]],
    ["sum(rate(a_total[5m])) / on(pod) group_left(device) b_info * 1e-3", ["a_total", "b_info"]],
    ['label_replace(up, "x", "$1", "job", "(.*)") > bool 0', ["up"]],
  ];
  for (const [expr, want] of cases) {
    const got = metricNames(expr).sort();
    if (JSON.stringify(got) !== JSON.stringify([...want].sort())) fail(`self-test: ${expr} gave ${got}`);
  }
  if (missing(["rate(tally_no_such_metric_total[1m])"], new Set(["tally_requests_total"])).length !== 1) {
    fail("self-test: a missing metric was not reported");
  }
  const sampleLabels = seriesLabels('tally_requests_total{backend="cpu",code="OK",identity="a",method="Aggregate"} 1\n' +
    'tally_request_duration_seconds_bucket{backend="cpu",method="Aggregate",le="0.1"} 1\n');
  if (unknownLabels(["sum by (tenant) (rate(tally_requests_total[1m]))"], sampleLabels).length !== 1) {
    fail("self-test: grouping by a label the metric lacks was not reported");
  }
  if (unknownLabels(['histogram_quantile(0.9, sum by (le, method, pod) (rate(tally_request_duration_seconds_bucket{code!="x"}[1m])))',
    "sum by (identity, code) (rate(tally_requests_total[1m]))"], sampleLabels).length !== 0) {
    fail("self-test: labels the metrics carry were reported");
  }

  const dashFile = args.dashboard || path.join(here, "../../deploy/grafana/tally-dashboard.json");
  const dashboard = JSON.parse(fs.readFileSync(dashFile, "utf8"));
  const scrape = fs.readFileSync(args.scrape, "utf8");
  const series = seriesNames(scrape);
  const exprs = exprsOf(dashboard);
  if (exprs.length === 0) fail("dashboard has no queries");
  const used = new Set(exprs.flatMap(metricNames));
  for (const n of used) if (!n.startsWith("tally_")) fail(`dashboard queries ${n}, not a tally_ metric`);
  for (const m of missing(exprs, series, args["gpu-optional"] ? GPU_ONLY : new Set())) {
    fail(`dashboard queries ${m}, absent from ${args.scrape}`);
  }
  const optional = args["gpu-optional"] ? GPU_ONLY : new Set();
  for (const l of unknownLabels(exprs, seriesLabels(scrape), optional)) {
    fail(`dashboard groups by ${l}, a label none of its metrics carries in ${args.scrape}`);
  }
  for (const p of dashboard.panels ?? []) {
    if (p.type !== "row" && !(p.targets ?? []).length) fail(`panel "${p.title}" has no query`);
  }
  console.log(`${exprs.length} queries, ${used.size} metrics checked against ${series.size} series names: ${failures} problems`);
  process.exit(failures ? 1 : 0);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
