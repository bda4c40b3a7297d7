// The validator's self-test: broken objects, renders, patches and alerts
// that the checks must report. A check that accepts one of these proves
// nothing about the manifests it passes.
import fs from "node:fs";
import path from "node:path";
import { alertMetricProblems } from "./alert_metric_checks.mjs";
import { writeCombination } from "./combinations.mjs";
import { tallyProblems } from "./manifest_checks.mjs";
import { jsonPatch, render } from "./render.mjs";

const deployment = (objs) => objs.find((o) => o.kind === "Deployment");
const podSpec = (objs) => deployment(objs).spec.template.spec;
const tallyOf = (objs) => podSpec(objs).containers.find((x) => x.name === "tally");
const setArg = (objs, from, to) => {
  const c = tallyOf(objs);
  c.args = c.args.map((a) => (a.startsWith(from) ? to : a)).filter((a) => a !== null);
};
const ofKind = (objs, kind, name) => objs.find((o) => o.kind === kind && (!name || o.metadata.name === name));

function renderCombination(deployDir, components) {
  const dir = writeCombination(deployDir, components);
  try {
    return render(dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export async function selfTest(deployDir, adapterRules, schemaProblems, metricsSource) {
  const problems = [];
  const at = (p) => render(path.join(deployDir, p));
  const base = at("base");
  const monitored = at("overlays/replicas");

  // Schemas.
  const broken = [
    ["Deployment with a string containerPort", base, (o) => o.kind === "Deployment",
      (o) => { o.spec.template.spec.containers[0].ports[0].containerPort = "grpc"; }],
    ["Deployment without containers", base, (o) => o.kind === "Deployment",
      (o) => { delete o.spec.template.spec.containers; }],
    ["Service port given as an object", base, (o) => o.kind === "Service",
      (o) => { o.spec.ports[0].port = { number: 50051 }; }],
    ["ServiceMonitor with a malformed interval", monitored, (o) => o.kind === "ServiceMonitor",
      (o) => { o.spec.endpoints[0].interval = "fifteen seconds"; }],
    ["PrometheusRule whose groups are a string", monitored, (o) => o.kind === "PrometheusRule",
      (o) => { o.spec.groups = "tally"; }],
    ["PodDisruptionBudget with a list selector", base, (o) => o.kind === "PodDisruptionBudget",
      (o) => { o.spec.selector = ["app"]; }],
  ];
  for (const [what, objs, pick, breakIt] of broken) {
    const obj = structuredClone(objs.find(pick));
    breakIt(obj);
    if ((await schemaProblems(obj)).length === 0) problems.push(`schema validator accepted: ${what}`);
  }
  if ((await schemaProblems({ apiVersion: "example.com/v1", kind: "Widget", metadata: { name: "w" } })).length === 0) {
    problems.push("schema validator accepted an object of unknown kind");
  }

  // tally's checks, each case on the render it breaks. Every render must
  // pass as it is, or the cases below would pass for the wrong reason.
  const renders = {
    base,
    monitored,
    colocated: at("overlays/colocated"),
    tls: at("overlays/tls"),
    datasets: at("overlays/durable-datasets"),
    fenced: renderCombination(deployDir, ["monitoring", "network-policy", "tls"]),
  };
  for (const [name, objs] of Object.entries(renders)) {
    for (const p of tallyProblems(objs, adapterRules)) problems.push(`tally checks refused the ${name} render itself: ${p}`);
  }
  const cases = [
    ["base", "grace period shorter than preStop + drain", (o) => { podSpec(o).terminationGracePeriodSeconds = 10; }],
    ["base", "readiness probe over HTTP", (o) => { tallyOf(o).readinessProbe = { httpGet: { port: 9464, path: "/metrics" } }; }],
    ["base", "no GPU requested", (o) => { delete tallyOf(o).resources.limits["nvidia.com/gpu"]; }],
    ["base", "a flag set in the ConfigMap and in args", (o) => { tallyOf(o).args.push("--listen=0.0.0.0:50051"); }],
    ["base", "--flagfile naming no mounted ConfigMap key", (o) => { setArg(o, "--flagfile=", "--flagfile=/etc/tally/other"); }],
    ["base", "strategy Recreate that keeps rollingUpdate", (o) => { deployment(o).spec.strategy.type = "Recreate"; }],
    ["base", "HPA on a metric no adapter rule serves", (o) => {
      o.push({ apiVersion: "autoscaling/v2", kind: "HorizontalPodAutoscaler", metadata: { name: "x" },
        spec: { scaleTargetRef: { apiVersion: "apps/v1", kind: "Deployment", name: "tally" }, maxReplicas: 2,
          metrics: [{ type: "Pods", pods: { metric: { name: "tally_nonexistent" }, target: { type: "AverageValue", averageValue: "1" } } }] } }); }],
    ["monitored", "replicas set on a Deployment the HPA scales", (o) => { deployment(o).spec.replicas = 3; }],
    ["monitored", "ServiceMonitor selecting both Services", (o) => {
      delete ofKind(o, "ServiceMonitor").spec.selector.matchLabels["app.kubernetes.io/component"]; }],
    ["monitored", "alerts with no ServiceMonitor", (o) => { o.splice(o.indexOf(ofKind(o, "ServiceMonitor")), 1); }],
    ["colocated", "a sidecar's /dev/shm not memory-backed", (o) => { podSpec(o).volumes.find((v) => v.name === "shm").emptyDir = {}; }],
    ["colocated", "a region budget over the shared /dev/shm", (o) => {
      setArg(o, "--max_region_bytes=", "--max_region_bytes=17179869184"); }],
    ["colocated", "tally not mounting the sidecar's /dev/shm", (o) => {
      const t = tallyOf(o);
      t.volumeMounts = t.volumeMounts.filter((m) => m.mountPath !== "/dev/shm"); }],
    ["colocated", "tally not the first container", (o) => { podSpec(o).containers.reverse(); }],
    ["tls", "TLS with probes on the TLS port", (o) => {
      for (const p of ["startupProbe", "livenessProbe", "readinessProbe"]) tallyOf(o)[p].grpc.port = 50051; }],
    ["tls", "TLS without the health-only port", (o) => {
      setArg(o, "--health_listen=", null);
      for (const p of ["startupProbe", "livenessProbe", "readinessProbe"]) tallyOf(o)[p].grpc.port = 50051; }],
    ["tls", "certificate Secret not mounted", (o) => {
      const c = tallyOf(o);
      c.volumeMounts = c.volumeMounts.filter((m) => m.name !== "tls"); }],
    ["tls", "certificate from a ConfigMap", (o) => {
      const v = podSpec(o).volumes.find((x) => x.name === "tls");
      delete v.secret;
      v.configMap = { name: "tally-flags" }; }],
    ["tls", "--health_listen on a port the container does not declare", (o) => {
      setArg(o, "--health_listen=", "--health_listen=0.0.0.0:50053"); }],
    ["datasets", "--dataset_dir on an emptyDir", (o) => {
      const v = podSpec(o).volumes.find((x) => x.name === "datasets");
      delete v.persistentVolumeClaim;
      v.emptyDir = {}; }],
    ["datasets", "--dataset_dir mounted read-only", (o) => {
      tallyOf(o).volumeMounts.find((m) => m.name === "datasets").readOnly = true; }],
    ["datasets", "--dataset_dir where nothing is mounted", (o) => {
      setArg(o, "--dataset_dir=", "--dataset_dir=/var/lib/tally/elsewhere"); }],
    ["datasets", "--dataset_dir with rolling updates", (o) => {
      deployment(o).spec.strategy = { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } }; }],
    ["datasets", "--dataset_dir with two replicas", (o) => { deployment(o).spec.replicas = 2; }],
    ["datasets", "--dataset_dir's volume without fsGroup", (o) => { delete podSpec(o).securityContext.fsGroup; }],
    ["datasets", "--dataset_dir's claim missing", (o) => { o.splice(o.indexOf(ofKind(o, "PersistentVolumeClaim")), 1); }],
    ["fenced", "metrics admitted from every namespace", (o) => {
      ofKind(o, "NetworkPolicy", "tally-metrics").spec.ingress[0].from = [{ namespaceSelector: {} }]; }],
    ["fenced", "metrics admitted from anywhere", (o) => { delete ofKind(o, "NetworkPolicy", "tally-metrics").spec.ingress[0].from; }],
    ["fenced", "gRPC admitted to no one", (o) => { o.splice(o.indexOf(ofKind(o, "NetworkPolicy", "tally-grpc")), 1); }],
    ["fenced", "metrics scraped but admitted to no one", (o) => { o.splice(o.indexOf(ofKind(o, "NetworkPolicy", "tally-metrics")), 1); }],
    ["fenced", "a rule without ports", (o) => { delete ofKind(o, "NetworkPolicy", "tally-grpc").spec.ingress[0].ports; }],
    ["fenced", "a policy port the container lacks", (o) => { ofKind(o, "NetworkPolicy", "tally-metrics").spec.ingress[0].ports[0].port = "metric"; }],
    ["fenced", "the health-only port admitted", (o) => {
      ofKind(o, "NetworkPolicy", "tally-grpc").spec.ingress[0].ports.push({ port: "health", protocol: "TCP" }); }],
  ];
  for (const [name, what, breakIt] of cases) {
    const objs = structuredClone(renders[name]);
    breakIt(objs);
    if (tallyProblems(objs, adapterRules).length === 0) problems.push(`tally checks accepted: ${what}`);
  }

  // The renderer's JSON patches.
  const doc = { spec: { containers: [{ name: "tally", args: ["--a"] }] } };
  const appended = jsonPatch(doc, [{ op: "test", path: "/spec/containers/0/name", value: "tally" },
    { op: "add", path: "/spec/containers/0/args/-", value: "--b" }], "self-test");
  if (JSON.stringify(appended.spec.containers[0].args) !== '["--a","--b"]') problems.push("JSON patch add at /- did not append");
  for (const [what, ops] of [
    ["a failed test", [{ op: "test", path: "/spec/containers/0/name", value: "client" }]],
    ["a remove of nothing", [{ op: "remove", path: "/spec/volumes" }]],
    ["an op outside scope", [{ op: "move", from: "/spec", path: "/x" }]],
  ]) {
    let threw = false;
    try { jsonPatch(doc, ops, "self-test"); } catch { threw = true; }
    if (!threw) problems.push(`JSON patch accepted ${what}`);
  }

  // Alerts on what tally does not export.
  const scrape = [
    'tally_requests_total{backend="cuda",code="OK",identity="anonymous",method="Aggregate"} 1',
    'tally_admission_rejections_total{backend="cuda"} 0', ""].join("\n");
  const alertCases = [
    ["a metric metrics.cc does not register", "rate(tally_gpu_lost_total[5m]) > 0"],
    ["grouping by a label the metric lacks", "sum by (tenant) (rate(tally_requests_total[5m])) > 0"],
    ["matching on a label the metric lacks", 'rate(tally_admission_rejections_total{method="Aggregate"}[5m]) > 0'],
    ["a status code misspelt", 'rate(tally_requests_total{code=~"Internal|UNKNOWN"}[5m]) > 0'],
  ];
  for (const [what, expr] of alertCases) {
    if (alertMetricProblems([{ alert: "Broken", expr }], metricsSource, scrape).length === 0) {
      problems.push(`alert checks accepted ${what}`);
    }
  }
  if (alertMetricProblems([{ alert: "Fine", expr: 'sum by (namespace) (rate(tally_requests_total{code=~"INTERNAL|UNKNOWN"}[5m])) > 0' }],
    metricsSource, scrape).length !== 0) {
    problems.push("alert checks refused an alert on metrics and labels tally exports");
  }
  return problems;
}
