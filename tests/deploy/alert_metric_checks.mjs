// The alerts read only what tally-server exports: every metric an alert's
// expression names is registered in server/metrics/metrics.cc, and appears
// in a scrape of tally-metrics-sample (which records one of everything
// through that file's Metrics class) with every label the expression groups
// by or matches on, and every label value it matches is one tally writes.
// An alert on a renamed metric, or on a label value misspelt, would never
// fire, and nothing else would say so.
import { SCRAPE_LABELS, metricNames, seriesLabels, seriesNames, unknownLabels } from "./dashboard.mjs";

// Series Prometheus writes itself for every target, with target labels only.
const PROMETHEUS_SERIES = new Set(["up"]);
const HISTOGRAM_SUFFIX = /_(bucket|sum|count)$/;

// Metric names metrics.cc registers: its "tally_..." string literals.
export function registeredNames(metricsSource) {
  return new Set([...metricsSource.matchAll(/"(tally_[a-z0-9_]+)"/g)].map((m) => m[1]));
}

// [{metric, label, op, value}] for every `metric{label op "value"}`.
export function matchersOf(expr) {
  const out = [];
  for (const sel of expr.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}/g)) {
    for (const m of sel[2].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)) {
      out.push({ metric: sel[1], label: m[1], op: m[2], value: m[3] });
    }
  }
  return out;
}

// Alerts: [{alert, expr}]. scrape: text of a /metrics scrape, or null (then
// only names are checked against metrics.cc).
export function alertMetricProblems(alerts, metricsSource, scrape) {
  const out = [];
  const registered = registeredNames(metricsSource);
  const isRegistered = (n) => registered.has(n) || (HISTOGRAM_SUFFIX.test(n) && registered.has(n.replace(HISTOGRAM_SUFFIX, "")));
  const series = scrape === null ? null : seriesNames(scrape);
  const labels = scrape === null ? null : seriesLabels(scrape);
  // Label values a scrape shows, and the string literals of metrics.cc
  // (status code and method names are written there).
  const literals = new Set([...metricsSource.matchAll(/"([^"\\\n]*)"/g)].map((m) => m[1]));
  const valuesOf = (metric, label) => new Set([...(scrape ?? "").matchAll(
    new RegExp(`^${metric}\\{[^}]*\\b${label}="([^"]*)"`, "gm"))].map((m) => m[1]));

  for (const { alert, expr } of alerts) {
    const names = metricNames(expr);
    for (const n of names) {
      if (PROMETHEUS_SERIES.has(n)) continue;
      if (!isRegistered(n)) out.push(`alert ${alert} reads ${n}, which server/metrics/metrics.cc does not register`);
      else if (series && !series.has(n)) out.push(`alert ${alert} reads ${n}, absent from the scrape`);
    }
    if (scrape === null) continue;
    for (const l of unknownLabels([expr], labels, PROMETHEUS_SERIES)) {
      out.push(`alert ${alert} groups by ${l}, a label none of its metrics carries`);
    }
    for (const m of matchersOf(expr)) {
      if (SCRAPE_LABELS.has(m.label)) continue;
      if (PROMETHEUS_SERIES.has(m.metric)) {
        out.push(`alert ${alert} matches ${m.metric} on ${m.label}, not one of its target labels`);
        continue;
      }
      if (!labels.get(m.metric)?.has(m.label)) {
        out.push(`alert ${alert} matches ${m.metric} on label ${m.label}, which it does not carry`);
        continue;
      }
      // A plain value, or an alternation of plain values, must each be one
      // tally writes; other regular expressions are left alone.
      if (!/^[A-Za-z0-9_:.+-]+(\|[A-Za-z0-9_:.+-]+)*$/.test(m.value)) continue;
      const known = valuesOf(m.metric, m.label);
      for (const v of m.value.split("|")) {
        if (!known.has(v) && !literals.has(v)) out.push(`alert ${alert} matches ${m.label}="${v}", a value tally never writes`);
      }
    }
  }
  return out;
}
