// Renders every kustomization under deploy/, and every combination of
// deploy/components over deploy/base, and validates every object offline:
// against Kubernetes' OpenAPI schemas (kubernetes-models) and the
// prometheus-operator CRD schemas, then against what tally-server needs
// (manifest_checks.mjs), and the alerts against the metrics tally exports
// (alert_metric_checks.mjs).
// Usage: node validate.mjs [--deploy=DIR] [--scrape=FILE] [--metrics-source=FILE]
//   --scrape: a metrics scrape; the adapter rules' series and the alerts'
//   metrics and labels must exist in it.
// Exits non-zero on any problem. Self-tests run first and must see broken
// objects rejected, so a validator that accepts anything fails the run.
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual, promisify } from "node:util";
import YAML from "yaml";
import { alertMetricProblems } from "./alert_metric_checks.mjs";
import { componentNames, excluded, subsets, writeCombination } from "./combinations.mjs";
import { flagsOf } from "./flags.mjs";
import { adapterRulesOf, tallyProblems } from "./manifest_checks.mjs";
import { isComponent, render } from "./render.mjs";
import { selfTest } from "./self_test.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=")).map(([k, ...v]) => [k, v.join("=")]));
const deployDir = path.resolve(args.deploy || path.join(here, "../../deploy"));
const metricsSourceFile = path.resolve(args["metrics-source"] || path.join(here, "../../server/metrics/metrics.cc"));

// --- schema validation --------------------------------------------------
const CRD_PACKAGES = { "monitoring.coreos.com": "@kubernetes-models/prometheus-operator" };

async function modelFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const pkg = CRD_PACKAGES[group] ?? "kubernetes-models";
  const sub = group === "" ? version : `${group}/${version}`;
  const file = path.join(here, "node_modules", pkg, sub, `${kind}.js`);
  if (!fs.existsSync(file)) return null;
  const mod = await import(file);
  return mod[kind] ?? null;
}

// Returns a list of problems with one object (empty: valid).
export async function schemaProblems(obj) {
  if (!obj || typeof obj !== "object" || !obj.apiVersion || !obj.kind) {
    return ["not a Kubernetes object (apiVersion and kind required)"];
  }
  const Model = await modelFor(obj.apiVersion, obj.kind);
  if (!Model) return [`no schema for ${obj.apiVersion} ${obj.kind}`];
  const problems = [];
  if (!obj.metadata?.name) problems.push("metadata.name is required");
  try {
    new Model(obj).validate();
  } catch (e) {
    problems.push(e.message);
  }
  return problems;
}

// --- the run ---------------------------------------------------------------
// Kustomizations (not Components, which render only where included).
function kustomizations(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...kustomizations(p));
    else if (e.name === "kustomization.yaml" && !isComponent(dir)) out.push(dir);
  }
  return out.sort();
}

const execFileAsync = promisify(execFile);
let kubectlPresent = null; // one look, shared by the renders running at once

async function kubectlKustomize(dir) {
  // TALLY_DEPLOY_RENDERER=builtin: render.mjs alone, as where kubectl is absent.
  if (process.env.TALLY_DEPLOY_RENDERER === "builtin") return null;
  kubectlPresent ??= execFileAsync("kubectl", ["version", "--client"]).then(() => true, () => false);
  if (!(await kubectlPresent)) return null;
  const { stdout } = await execFileAsync("kubectl", ["kustomize", dir], { maxBuffer: 64 << 20 });
  return YAML.parseAllDocuments(stdout).map((d) => d.toJS()).filter(Boolean);
}

// fn over items, as many at once as there are CPUs (kubectl runs apart).
async function inParallel(items, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, os.cpus().length) }, worker));
  return out;
}

const keyOf = (o) => `${o.apiVersion} ${o.kind} ${o.metadata?.namespace ?? ""}/${o.metadata?.name}`;

// Renders one kustomization both ways (where kubectl exists) and returns
// {objects, problems, by}: the objects and what differs between renderers.
async function renderBoth(dir) {
  let objects;
  try {
    objects = render(dir);
  } catch (e) {
    return { objects: null, problems: [`render: ${e.message}`] };
  }
  let real;
  try {
    real = await kubectlKustomize(dir);
  } catch (e) {
    return { objects: null, problems: [`kubectl kustomize: ${(e.stderr || e.message).toString().trim()}`] };
  }
  if (!real) return { objects, problems: [], by: "render.mjs" };
  // The same objects, field for field, as kustomize itself renders.
  const problems = [];
  const mine = new Map(objects.map((o) => [keyOf(o), o]));
  const theirs = new Map(real.map((o) => [keyOf(o), o]));
  for (const k of new Set([...mine.keys(), ...theirs.keys()])) {
    if (!isDeepStrictEqual(mine.get(k), theirs.get(k))) problems.push(`${k} differs from kubectl kustomize`);
  }
  return { objects: real, problems, by: "kubectl kustomize, matched by render.mjs" };
}

async function schemaAll(objects) {
  const out = [];
  for (const o of objects) for (const p of await schemaProblems(o)) out.push(`${keyOf(o)}: ${p}`);
  return out;
}

const tallyFlags = (objects) => {
  const dep = objects.find((o) => o.kind === "Deployment");
  return flagsOf(objects, dep.spec.template, dep.spec.template.spec.containers.find((c) => c.name === "tally")).flags;
};

async function main() {
  let failures = 0;
  const fail = (msg) => { failures++; console.log(`FAIL ${msg}`); };
  const adapterRules = adapterRulesOf(path.join(deployDir, "prometheus-adapter/rules.yaml"));
  const metricsSource = fs.readFileSync(metricsSourceFile, "utf8");

  for (const p of await selfTest(deployDir, adapterRules, schemaProblems, metricsSource)) fail(`self-test: ${p}`);

  const scrape = args.scrape ? fs.readFileSync(args.scrape, "utf8") : null;
  if (scrape !== null) {
    for (const r of adapterRules) {
      if (!new RegExp(`^${r.series}[{ ]`, "m").test(scrape)) fail(`adapter rule reads ${r.series}, absent from ${args.scrape}`);
      if (r.podLabel !== "pod" || !/<<\.LabelMatchers>>/.test(r.query ?? "")) fail(`adapter rule for ${r.series} must map the pod label and use <<.LabelMatchers>>`);
    }
  }

  const ruleSets = new Map(); // the PrometheusRules rendered, by content
  const keepRules = (objects) => {
    for (const o of objects.filter((x) => x.kind === "PrometheusRule")) ruleSets.set(JSON.stringify(o.spec), o);
  };

  const dirs = kustomizations(deployDir);
  if (dirs.length === 0) fail(`no kustomization.yaml under ${deployDir}`);
  let total = 0;
  for (const dir of dirs) {
    const rel = path.relative(deployDir, dir);
    const { objects, problems, by } = await renderBoth(dir);
    for (const p of problems) fail(`${rel}: ${p}`);
    if (!objects) continue;
    total += objects.length;
    for (const p of await schemaAll(objects)) fail(`${rel}: ${p}`);
    for (const p of tallyProblems(objects, adapterRules)) fail(`${rel}: ${p}`);
    keepRules(objects);
    console.log(`${rel}: ${objects.length} objects (rendered by ${by})`);
  }

  // Every combination of components over the base: it renders, in either
  // order, to the same flags, and passes, or is refused where EXCLUSIVE says.
  const names = componentNames(deployDir);
  let passed = 0;
  let refused = 0;
  const combos = await inParallel(subsets(names), async (set) => {
    const dir = writeCombination(deployDir, set);
    const reversedDir = writeCombination(deployDir, [...set].reverse());
    try {
      return { set, ...(await renderBoth(dir)), reversed: set.length > 1 ? render(reversedDir) : null };
    } catch (e) {
      return { set, objects: null, problems: [e.message] };
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
      fs.rmSync(reversedDir, { recursive: true, force: true });
    }
  });
  for (const { set, objects, problems, reversed } of combos) {
    const label = `base + ${set.length ? set.join(" + ") : "no components"}`;
    for (const p of problems) fail(`${label}: ${p}`);
    if (!objects) continue;
    total += objects.length;
    for (const p of await schemaAll(objects)) fail(`${label}: ${p}`);
    keepRules(objects);
    const checks = tallyProblems(objects, adapterRules);
    const exclusive = excluded(set);
    if (exclusive && checks.length === 0) fail(`${label}: passed the checks, but ${exclusive.why}`);
    if (!exclusive) for (const p of checks) fail(`${label}: ${p}`);
    if (exclusive) refused++;
    else passed++;
    if (reversed && !isDeepStrictEqual(tallyFlags(reversed), tallyFlags(objects))) {
      fail(`${label}: listing the components in reverse order gives other flags`);
    }
  }
  console.log(`combinations of ${names.length} components (${names.join(", ")}): ${passed} pass, ${refused} refused as they must be`);

  const alerts = [...ruleSets.values()].flatMap((o) => o.spec.groups.flatMap((g) => g.rules.filter((r) => r.alert)));
  if (ruleSets.size > 0 && alerts.length === 0) fail("the PrometheusRule holds no alerts");
  for (const p of alertMetricProblems(alerts, metricsSource, scrape)) fail(p);
  console.log(`${alerts.length} alerts checked against ${path.relative(process.cwd(), metricsSourceFile)}` +
    (scrape === null ? " (names only: no --scrape, so labels are not checked)" : ` and ${args.scrape}`));

  console.log(`${dirs.length} kustomizations, ${2 ** names.length} combinations, ${total} objects, ${failures} problems`);
  process.exit(failures === 0 ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(2); });
