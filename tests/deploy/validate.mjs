// Renders every kustomization under deploy/ and validates every object
// offline: against Kubernetes' OpenAPI schemas (kubernetes-models) and the
// prometheus-operator CRD schemas, then against what tally-server needs
// (GPU request, gRPC probes on the health service, a grace period that covers
// the drain, selectors that match, an HPA metric the adapter serves).
// Usage: node validate.mjs [--deploy DIR] [--scrape FILE]
//   --scrape: a metrics scrape; the adapter rules' series must exist in it.
// Exits non-zero on any problem. Self-tests run first and must see broken
// objects rejected, so a validator that accepts anything fails the run.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";
import YAML from "yaml";
import { readDocs, render } from "./render.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=")).map(([k, ...v]) => [k, v.join("=")]));
const deployDir = path.resolve(args.deploy || path.join(here, "../../deploy"));

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

// --- tally-specific checks over one rendered kustomization ----------------
function flagsOf(objects) {
  const flags = {};
  for (const cm of objects.filter((o) => o.kind === "ConfigMap")) {
    for (const line of (cm.data?.flags ?? "").split("\n")) {
      const m = /^--([a-z_]+)=(.*)$/.exec(line.trim());
      if (m) flags[m[1]] = m[2];
    }
  }
  return flags;
}

const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);

export function tallyProblems(objects, adapterRules) {
  const out = [];
  const deployments = objects.filter((o) => o.kind === "Deployment");
  if (deployments.length !== 1) return [`expected one Deployment, found ${deployments.length}`];
  const dep = deployments[0];
  const pod = dep.spec.template;
  const c = pod.spec.containers.find((x) => x.name === "tally");
  if (!c) return ["no container named tally"];
  const flags = flagsOf(objects);
  const port = (name) => c.ports?.find((p) => p.name === name)?.containerPort;

  if (!matches(dep.spec.selector.matchLabels, pod.metadata.labels)) out.push("Deployment selector does not match its pods");
  const gpuLimit = Number(c.resources?.limits?.["nvidia.com/gpu"] ?? 0);
  if (gpuLimit < 1) out.push("container must limit nvidia.com/gpu to at least 1");
  for (const r of ["cpu", "memory"]) {
    if (!c.resources?.requests?.[r]) out.push(`resources.requests.${r} missing`);
  }
  if (!c.resources?.limits?.memory) out.push("resources.limits.memory missing");

  // Flags: fed from the ConfigMap through --flagfile, ports agree with them.
  const flagfile = (c.args ?? []).find((a) => a.startsWith("--flagfile="))?.slice(11);
  const cmVolume = pod.spec.volumes?.find((v) => v.configMap?.name === "tally-flags");
  const mount = c.volumeMounts?.find((m) => m.name === cmVolume?.name);
  if (!flagfile || !cmVolume || !mount || flagfile !== `${mount.mountPath}/flags`) {
    out.push("--flagfile must point at the tally-flags ConfigMap's mounted `flags` key");
  }
  if (!objects.some((o) => o.kind === "ConfigMap" && o.metadata.name === "tally-flags")) out.push("ConfigMap tally-flags missing");
  const listenPort = Number((flags.listen ?? "").split(":").pop());
  const metricsPort = Number((flags.metrics_listen ?? "").split(":").pop());
  if (listenPort !== port("grpc")) out.push(`--listen port ${listenPort} != containerPort grpc ${port("grpc")}`);
  if (metricsPort !== port("metrics")) out.push(`--metrics_listen port ${metricsPort} != containerPort metrics ${port("metrics")}`);

  // Probes: native gRPC on the serving port, or on the health-only port when
  // there is one; readiness on the service name. Kubelet's gRPC probes speak
  // plaintext only, so a TLS port needs the health-only port.
  const healthPort = flags.health_listen ? Number(flags.health_listen.split(":").pop()) : null;
  if (healthPort !== null && healthPort !== port("health")) {
    out.push(`--health_listen port ${healthPort} != containerPort health ${port("health")}`);
  }
  if (flags.tls_cert_file && healthPort === null) {
    out.push("--tls_cert_file needs --health_listen: kubelet's gRPC probes cannot speak TLS");
  }
  const probePort = healthPort ?? listenPort;
  for (const p of ["livenessProbe", "readinessProbe", "startupProbe"]) {
    if (c[p] && c[p].grpc?.port !== probePort) out.push(`${p} must be a grpc probe on port ${probePort}`);
  }
  // Certificates, keys and tokens come from Secrets mounted where the flags
  // say, never from the image or a ConfigMap.
  for (const f of ["tls_cert_file", "tls_key_file", "tls_client_ca_file", "auth_token_file"]) {
    if (!flags[f]) continue;
    const dir = path.posix.dirname(flags[f]);
    const m = c.volumeMounts?.find((v) => v.mountPath === dir);
    const vol = pod.spec.volumes?.find((v) => v.name === m?.name);
    if (!vol?.secret) out.push(`--${f}=${flags[f]} is not in a mounted Secret`);
  }
  if (flags.tls_key_file && !flags.tls_cert_file) out.push("--tls_key_file without --tls_cert_file");
  if (!c.livenessProbe || !c.readinessProbe) out.push("liveness and readiness probes required");
  if (c.readinessProbe?.grpc?.service !== "tally.v1.Aggregator") out.push("readinessProbe must check service tally.v1.Aggregator");

  // Shutdown: preStop + drain must fit inside the grace period.
  const drain = Number(flags.drain_grace_seconds ?? NaN);
  const pre = c.lifecycle?.preStop;
  const preSeconds = pre?.sleep?.seconds ?? Number((pre?.exec?.command ?? []).at(-1));
  const grace = pod.spec.terminationGracePeriodSeconds ?? 30;
  if (!Number.isFinite(drain)) out.push("--drain_grace_seconds missing from the flags");
  if (!Number.isFinite(preSeconds)) out.push("preStop hook (sleep N) missing");
  if (grace < preSeconds + drain) {
    out.push(`terminationGracePeriodSeconds ${grace} < preStop ${preSeconds} s + drain ${drain} s`);
  }
  const sc = c.securityContext ?? {};
  if (!(pod.spec.securityContext?.runAsNonRoot || sc.runAsNonRoot)) out.push("pods must run as non-root");

  // Services: one normal, one headless, both selecting the pods.
  const services = objects.filter((o) => o.kind === "Service");
  for (const s of services) {
    if (!matches(s.spec.selector, pod.metadata.labels)) out.push(`Service ${s.metadata.name} selects no tally pod`);
  }
  if (!services.some((s) => s.spec.clusterIP === "None")) out.push("headless Service missing");
  if (!services.some((s) => s.spec.clusterIP !== "None")) out.push("normal Service missing");

  // ServiceMonitor: scrapes exactly one Service, through its metrics port.
  const monitors = objects.filter((o) => o.kind === "ServiceMonitor");
  if (monitors.length !== 1) out.push(`expected one ServiceMonitor, found ${monitors.length}`);
  for (const m of monitors) {
    const sel = services.filter((s) => matches(m.spec.selector.matchLabels, s.metadata.labels));
    if (sel.length !== 1) out.push(`ServiceMonitor selects ${sel.length} Services (each pod must be scraped once)`);
    for (const e of m.spec.endpoints) {
      const sp = sel[0]?.spec.ports.find((p) => p.name === e.port);
      if (!sp || (sp.targetPort !== "metrics" && sp.targetPort !== metricsPort)) out.push(`ServiceMonitor port ${e.port} is not the metrics port`);
    }
  }

  const pdbs = objects.filter((o) => o.kind === "PodDisruptionBudget");
  if (pdbs.length !== 1) out.push(`expected one PodDisruptionBudget, found ${pdbs.length}`);
  for (const p of pdbs) {
    if (!matches(p.spec.selector.matchLabels, pod.metadata.labels)) out.push("PodDisruptionBudget selects no tally pod");
    if (dep.spec.replicas === 1 && p.spec.minAvailable !== undefined && Number(p.spec.minAvailable) >= 1) {
      out.push("minAvailable >= 1 with one replica blocks node drains");
    }
  }

  // Shared memory (overlays/colocated): a container that shares /dev/shm
  // with tally shares the same memory-backed volume, sized, and run as the
  // same user (the objects clients create are theirs alone, mode 0600).
  const shmOf = (x) => x.volumeMounts?.find((m) => m.mountPath === "/dev/shm")?.name;
  const sharers = pod.spec.containers.filter((x) => x !== c && shmOf(x));
  if (sharers.length > 0) {
    const volume = pod.spec.volumes?.find((v) => v.name === shmOf(c));
    if (!volume) out.push("a sidecar mounts /dev/shm but tally does not");
    for (const x of sharers) {
      if (shmOf(x) !== shmOf(c)) out.push(`container ${x.name} mounts another volume at /dev/shm than tally`);
      if (x.securityContext?.runAsUser !== undefined && x.securityContext.runAsUser !== (c.securityContext?.runAsUser ?? pod.spec.securityContext?.runAsUser)) {
        out.push(`container ${x.name} runs as another user than tally: tally could not open its objects`);
      }
    }
    if (volume && volume.emptyDir?.medium !== "Memory") out.push("the shared /dev/shm must be an emptyDir with medium: Memory");
    const quantity = (q) => {
      const m = /^(\d+)(Ki|Mi|Gi|Ti)?$/.exec(String(q ?? ""));
      return m ? Number(m[1]) * 1024 ** ({ Ki: 1, Mi: 2, Gi: 3, Ti: 4 }[m[2]] ?? 0) : NaN;
    };
    const size = quantity(volume?.emptyDir?.sizeLimit);
    if (!Number.isFinite(size)) out.push("the shared /dev/shm needs a sizeLimit");
    const budget = Number(flags.max_region_bytes ?? NaN);
    if (!Number.isFinite(budget) || budget === 0 || budget > size) {
      out.push("--max_region_bytes must be set, and no larger than the shared /dev/shm's sizeLimit");
    }
  }

  for (const h of objects.filter((o) => o.kind === "HorizontalPodAutoscaler")) {
    const ref = h.spec.scaleTargetRef;
    if (ref.kind !== "Deployment" || ref.name !== dep.metadata.name) out.push("HPA does not scale the tally Deployment");
    for (const m of h.spec.metrics ?? []) {
      if (m.type !== "Pods") continue;
      const name = m.pods.metric.name;
      if (!adapterRules.some((r) => r.servedAs === name)) out.push(`HPA metric ${name} is served by no prometheus-adapter rule`);
    }
  }
  return out;
}

// prometheus-adapter rules: what each serves, and which series it reads.
export function adapterRulesOf(file) {
  const [doc] = readDocs(file);
  return (doc.rules ?? []).map((r) => {
    const series = /^([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(r.seriesQuery)?.[1];
    const re = new RegExp(r.name?.matches ?? "^(.*)$");
    const m = re.exec(series ?? "");
    const servedAs = m ? (r.name?.as ? r.name.as.replace(/\$(\d)/g, (_, i) => m[i]) : series) : null;
    const overrides = r.resources?.overrides ?? {};
    return { series, servedAs, podLabel: Object.keys(overrides).find((k) => overrides[k].resource === "pod"),
      query: r.metricsQuery };
  });
}

// --- the run ---------------------------------------------------------------
function kustomizations(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...kustomizations(p));
    else if (e.name === "kustomization.yaml") out.push(dir);
  }
  return out.sort();
}

function kubectlKustomize(dir) {
  // TALLY_DEPLOY_RENDERER=builtin: render.mjs alone, as where kubectl is absent.
  if (process.env.TALLY_DEPLOY_RENDERER === "builtin") return null;
  try {
    execFileSync("kubectl", ["version", "--client"], { stdio: "ignore" });
  } catch {
    return null;
  }
  const text = execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8" });
  return YAML.parseAllDocuments(text).map((d) => d.toJS()).filter(Boolean);
}

const keyOf = (o) => `${o.apiVersion} ${o.kind} ${o.metadata?.namespace ?? ""}/${o.metadata?.name}`;

async function selfTest(adapterRules) {
  // Each case must be reported; otherwise the checks below prove nothing.
  const problems = [];
  const base = render(path.join(deployDir, "base"));
  const broken = [
    ["Deployment with a string containerPort", (o) => o.kind === "Deployment",
      (o) => { o.spec.template.spec.containers[0].ports[0].containerPort = "grpc"; }],
    ["Deployment without containers", (o) => o.kind === "Deployment",
      (o) => { delete o.spec.template.spec.containers; }],
    ["Service port given as an object", (o) => o.kind === "Service",
      (o) => { o.spec.ports[0].port = { number: 50051 }; }],
    ["ServiceMonitor with a malformed interval", (o) => o.kind === "ServiceMonitor",
      (o) => { o.spec.endpoints[0].interval = "fifteen seconds"; }],
    ["PodDisruptionBudget with a list selector", (o) => o.kind === "PodDisruptionBudget",
      (o) => { o.spec.selector = ["app"]; }],
  ];
  for (const [what, pick, breakIt] of broken) {
    const obj = structuredClone(base.find(pick));
    breakIt(obj);
    if ((await schemaProblems(obj)).length === 0) problems.push(`schema validator accepted: ${what}`);
  }
  if ((await schemaProblems({ apiVersion: "example.com/v1", kind: "Widget", metadata: { name: "w" } })).length === 0) {
    problems.push("schema validator accepted an object of unknown kind");
  }
  const semantic = [
    ["grace period shorter than preStop + drain", (objs) => {
      objs.find((o) => o.kind === "Deployment").spec.template.spec.terminationGracePeriodSeconds = 10; }],
    ["readiness probe over HTTP", (objs) => {
      const c = objs.find((o) => o.kind === "Deployment").spec.template.spec.containers[0];
      c.readinessProbe = { httpGet: { port: 9464, path: "/metrics" } }; }],
    ["no GPU requested", (objs) => {
      const c = objs.find((o) => o.kind === "Deployment").spec.template.spec.containers[0];
      delete c.resources.limits["nvidia.com/gpu"]; }],
    ["ServiceMonitor selecting both Services", (objs) => {
      delete objs.find((o) => o.kind === "ServiceMonitor").spec.selector.matchLabels["app.kubernetes.io/component"]; }],
    ["HPA on a metric no adapter rule serves", (objs) => {
      objs.push({ apiVersion: "autoscaling/v2", kind: "HorizontalPodAutoscaler", metadata: { name: "x" },
        spec: { scaleTargetRef: { apiVersion: "apps/v1", kind: "Deployment", name: "tally" }, maxReplicas: 2,
          metrics: [{ type: "Pods", pods: { metric: { name: "tally_nonexistent" }, target: { type: "AverageValue", averageValue: "1" } } }] } }); }],
  ];
  const colocated = render(path.join(deployDir, "overlays/colocated"));
  const sidecar = (objs) => objs.find((o) => o.kind === "Deployment").spec.template.spec;
  const colocatedBroken = [
    ["a sidecar's /dev/shm not memory-backed", (objs) => { sidecar(objs).volumes.find((v) => v.name === "shm").emptyDir = {}; }],
    ["a region budget over the shared /dev/shm", (objs) => {
      const cm = objs.find((o) => o.kind === "ConfigMap" && o.metadata.name === "tally-flags");
      cm.data.flags = cm.data.flags.replace(/--max_region_bytes=\d+/, "--max_region_bytes=17179869184"); }],
    ["tally not mounting the sidecar's /dev/shm", (objs) => {
      const t = sidecar(objs).containers.find((x) => x.name === "tally");
      t.volumeMounts = t.volumeMounts.filter((m) => m.mountPath !== "/dev/shm"); }],
  ];
  for (const [what, breakIt] of colocatedBroken) {
    const objs = structuredClone(colocated);
    breakIt(objs);
    if (tallyProblems(objs, adapterRules).length === 0) problems.push(`tally checks accepted: ${what}`);
  }
  for (const [what, breakIt] of semantic) {
    const objs = structuredClone(base);
    breakIt(objs);
    if (tallyProblems(objs, adapterRules).length === 0) problems.push(`tally checks accepted: ${what}`);
  }
  // The TLS overlay, broken the ways that would leave pods unprobed or
  // without their certificates.
  const tls = render(path.join(deployDir, "overlays/tls"));
  if (tallyProblems(tls, adapterRules).length !== 0) problems.push("tally checks refused the tls overlay itself");
  const container = (objs) => objs.find((o) => o.kind === "Deployment").spec.template.spec.containers[0];
  const setFlags = (objs, edit) => {
    const cm = objs.find((o) => o.kind === "ConfigMap" && o.metadata.name === "tally-flags");
    cm.data.flags = edit(cm.data.flags);
  };
  const tlsBroken = [
    ["TLS with probes on the TLS port", (objs) => {
      for (const p of ["startupProbe", "livenessProbe", "readinessProbe"]) container(objs)[p].grpc.port = 50051; }],
    ["TLS without the health-only port", (objs) => {
      setFlags(objs, (f) => f.replace(/^--health_listen=.*\n/m, ""));
      for (const p of ["startupProbe", "livenessProbe", "readinessProbe"]) container(objs)[p].grpc.port = 50051; }],
    ["certificate Secret not mounted", (objs) => {
      const c = container(objs);
      c.volumeMounts = c.volumeMounts.filter((m) => m.name !== "tls"); }],
    ["certificate from a ConfigMap", (objs) => {
      const v = objs.find((o) => o.kind === "Deployment").spec.template.spec.volumes.find((x) => x.name === "tls");
      delete v.secret;
      v.configMap = { name: "tally-flags" }; }],
    ["--health_listen on a port the container does not declare", (objs) => {
      setFlags(objs, (f) => f.replace("--health_listen=0.0.0.0:50052", "--health_listen=0.0.0.0:50053")); }],
  ];
  for (const [what, breakIt] of tlsBroken) {
    const objs = structuredClone(tls);
    breakIt(objs);
    if (tallyProblems(objs, adapterRules).length === 0) problems.push(`tally checks accepted: ${what}`);
  }
  return problems;
}

async function main() {
  let failures = 0;
  const fail = (msg) => { failures++; console.log(`FAIL ${msg}`); };
  const adapterFile = path.join(deployDir, "prometheus-adapter/rules.yaml");
  const adapterRules = adapterRulesOf(adapterFile);

  for (const p of await selfTest(adapterRules)) fail(`self-test: ${p}`);

  if (args.scrape) {
    const scrape = fs.readFileSync(args.scrape, "utf8");
    for (const r of adapterRules) {
      if (!new RegExp(`^${r.series}[{ ]`, "m").test(scrape)) fail(`adapter rule reads ${r.series}, absent from ${args.scrape}`);
      if (r.podLabel !== "pod" || !/<<\.LabelMatchers>>/.test(r.query ?? "")) fail(`adapter rule for ${r.series} must map the pod label and use <<.LabelMatchers>>`);
    }
  }

  const dirs = kustomizations(deployDir);
  if (dirs.length === 0) fail(`no kustomization.yaml under ${deployDir}`);
  let total = 0;
  for (const dir of dirs) {
    const rel = path.relative(deployDir, dir);
    let objects;
    try {
      objects = render(dir);
    } catch (e) {
      fail(`${rel}: render: ${e.message}`);
      continue;
    }
    let real;
    try {
      real = kubectlKustomize(dir);
    } catch (e) {
      fail(`${rel}: kubectl kustomize: ${(e.stderr || e.message).toString().trim()}`);
      continue;
    }
    if (real) {
      // The same objects, field for field, as kustomize itself renders.
      const mine = new Map(objects.map((o) => [keyOf(o), o]));
      const theirs = new Map(real.map((o) => [keyOf(o), o]));
      for (const k of new Set([...mine.keys(), ...theirs.keys()])) {
        if (!isDeepStrictEqual(mine.get(k), theirs.get(k))) fail(`${rel}: ${k} differs from kubectl kustomize`);
      }
      objects = real;
    }
    for (const o of objects) {
      total++;
      for (const p of await schemaProblems(o)) fail(`${rel}: ${keyOf(o)}: ${p}`);
    }
    for (const p of tallyProblems(objects, adapterRules)) fail(`${rel}: ${p}`);
    console.log(`${rel}: ${objects.length} objects${real ? " (rendered by kubectl kustomize, matched by render.mjs)" : " (rendered by render.mjs)"}`);
  }
  console.log(`${dirs.length} kustomizations, ${total} objects, ${failures} problems`);
  process.exit(failures === 0 ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(2); });
