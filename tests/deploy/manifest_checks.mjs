// What tally-server needs of one rendered deployment, beyond the schemas:
// GPU request, flags that agree with ports and mounts, gRPC probes on the
// health service, a grace period that covers the drain, selectors that
// match, an HPA that owns its count and scales on a metric the adapter
// serves, a dataset volume one server owns, and NetworkPolicies that admit
// clients and Prometheus only where they should.
import path from "node:path";
import { flagsOf } from "./flags.mjs";
import { networkPolicyProblems } from "./network_policy_checks.mjs";
import { readDocs } from "./render.mjs";

export const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);

const portOf = (flag) => (flag === undefined ? null : Number(flag.split(":").pop()));

export function tallyProblems(objects, adapterRules) {
  const deployments = objects.filter((o) => o.kind === "Deployment");
  if (deployments.length !== 1) return [`expected one Deployment, found ${deployments.length}`];
  const dep = deployments[0];
  const pod = dep.spec.template;
  const c = pod.spec.containers.find((x) => x.name === "tally");
  if (!c) return ["no container named tally"];
  const { flags, problems: out } = flagsOf(objects, pod, c);
  const ctx = { objects, dep, pod, c, flags, port: (name) => c.ports?.find((p) => p.name === name)?.containerPort };
  // The components' JSON patches append tally's flags to containers/0.
  if (pod.spec.containers[0] !== c) out.push("tally must be the first container (components append to containers/0/args)");
  out.push(...podProblems(ctx), ...probeAndSecretProblems(ctx), ...shutdownProblems(ctx),
    ...serviceProblems(ctx), ...sharedMemoryProblems(ctx), ...scalingProblems(ctx, adapterRules),
    ...datasetDirProblems(ctx), ...networkPolicyProblems(ctx));
  return out;
}

function podProblems({ objects, dep, pod, c, flags, port }) {
  const out = [];
  if (!matches(dep.spec.selector.matchLabels, pod.metadata.labels)) out.push("Deployment selector does not match its pods");
  const gpuLimit = Number(c.resources?.limits?.["nvidia.com/gpu"] ?? 0);
  if (gpuLimit < 1) out.push("container must limit nvidia.com/gpu to at least 1");
  for (const r of ["cpu", "memory"]) {
    if (!c.resources?.requests?.[r]) out.push(`resources.requests.${r} missing`);
  }
  if (!c.resources?.limits?.memory) out.push("resources.limits.memory missing");
  if (!(c.args ?? []).includes("--flagfile=/etc/tally/flags")) out.push("args must read the tally-flags ConfigMap (--flagfile=/etc/tally/flags)");
  if (!objects.some((o) => o.kind === "ConfigMap" && o.metadata.name === "tally-flags")) out.push("ConfigMap tally-flags missing");
  if (portOf(flags.listen) !== port("grpc")) out.push(`--listen port ${portOf(flags.listen)} != containerPort grpc ${port("grpc")}`);
  if (portOf(flags.metrics_listen) !== port("metrics")) {
    out.push(`--metrics_listen port ${portOf(flags.metrics_listen)} != containerPort metrics ${port("metrics")}`);
  }
  const sc = c.securityContext ?? {};
  if (!(pod.spec.securityContext?.runAsNonRoot || sc.runAsNonRoot)) out.push("pods must run as non-root");
  return out;
}

// Probes: native gRPC on the serving port, or on the health-only port when
// there is one; readiness on the service name. Kubelet's gRPC probes speak
// plaintext only, so a TLS port needs the health-only port. Certificates,
// keys and tokens come from Secrets mounted where the flags say, never from
// the image or a ConfigMap.
function probeAndSecretProblems({ pod, c, flags, port }) {
  const out = [];
  const healthPort = portOf(flags.health_listen);
  if (healthPort !== null && healthPort !== port("health")) {
    out.push(`--health_listen port ${healthPort} != containerPort health ${port("health")}`);
  }
  if (flags.tls_cert_file && healthPort === null) {
    out.push("--tls_cert_file needs --health_listen: kubelet's gRPC probes cannot speak TLS");
  }
  const probePort = healthPort ?? portOf(flags.listen);
  for (const p of ["livenessProbe", "readinessProbe", "startupProbe"]) {
    if (c[p] && c[p].grpc?.port !== probePort) out.push(`${p} must be a grpc probe on port ${probePort}`);
  }
  for (const f of ["tls_cert_file", "tls_key_file", "tls_client_ca_file", "auth_token_file"]) {
    if (!flags[f]) continue;
    const vol = volumeAt(pod, c, path.posix.dirname(flags[f]));
    if (!vol?.secret) out.push(`--${f}=${flags[f]} is not in a mounted Secret`);
  }
  if (flags.tls_key_file && !flags.tls_cert_file) out.push("--tls_key_file without --tls_cert_file");
  if (!c.livenessProbe || !c.readinessProbe) out.push("liveness and readiness probes required");
  if (c.readinessProbe?.grpc?.service !== "tally.v1.Aggregator") out.push("readinessProbe must check service tally.v1.Aggregator");
  return out;
}

// The volume mounted in container c at exactly dir, if any.
function volumeAt(pod, c, dir) {
  const m = c.volumeMounts?.find((v) => v.mountPath === dir);
  return m ? { ...pod.spec.volumes?.find((v) => v.name === m.name), readOnly: m.readOnly === true } : null;
}

// Shutdown: preStop + drain must fit inside the grace period; a Recreate
// rollout carries no rollingUpdate (the API refuses both).
function shutdownProblems({ dep, pod, c, flags }) {
  const out = [];
  const drain = Number(flags.drain_grace_seconds ?? NaN);
  const pre = c.lifecycle?.preStop;
  const preSeconds = pre?.sleep?.seconds ?? Number((pre?.exec?.command ?? []).at(-1));
  const grace = pod.spec.terminationGracePeriodSeconds ?? 30;
  if (!Number.isFinite(drain)) out.push("--drain_grace_seconds missing from the flags");
  if (!Number.isFinite(preSeconds)) out.push("preStop hook (sleep N) missing");
  if (grace < preSeconds + drain) {
    out.push(`terminationGracePeriodSeconds ${grace} < preStop ${preSeconds} s + drain ${drain} s`);
  }
  if (dep.spec.strategy?.type === "Recreate" && dep.spec.strategy.rollingUpdate) {
    out.push("strategy Recreate with rollingUpdate set (the API refuses it)");
  }
  return out;
}

// Services: one normal, one headless, both selecting the pods; at most one
// ServiceMonitor (components/monitoring), scraping exactly one Service
// through its metrics port; alerts only where something scrapes.
function serviceProblems({ objects, dep, pod, flags }) {
  const out = [];
  const services = objects.filter((o) => o.kind === "Service");
  for (const s of services) {
    if (!matches(s.spec.selector, pod.metadata.labels)) out.push(`Service ${s.metadata.name} selects no tally pod`);
  }
  if (!services.some((s) => s.spec.clusterIP === "None")) out.push("headless Service missing");
  if (!services.some((s) => s.spec.clusterIP !== "None")) out.push("normal Service missing");

  const monitors = objects.filter((o) => o.kind === "ServiceMonitor");
  if (monitors.length > 1) out.push(`expected at most one ServiceMonitor, found ${monitors.length}`);
  for (const m of monitors) {
    const sel = services.filter((s) => matches(m.spec.selector.matchLabels, s.metadata.labels));
    if (sel.length !== 1) out.push(`ServiceMonitor selects ${sel.length} Services (each pod must be scraped once)`);
    for (const e of m.spec.endpoints) {
      const sp = sel[0]?.spec.ports.find((p) => p.name === e.port);
      if (!sp || (sp.targetPort !== "metrics" && sp.targetPort !== portOf(flags.metrics_listen))) {
        out.push(`ServiceMonitor port ${e.port} is not the metrics port`);
      }
    }
  }
  if (objects.some((o) => o.kind === "PrometheusRule") && monitors.length === 0) {
    out.push("PrometheusRule without a ServiceMonitor: nothing scrapes what the alerts read");
  }

  const pdbs = objects.filter((o) => o.kind === "PodDisruptionBudget");
  if (pdbs.length !== 1) out.push(`expected one PodDisruptionBudget, found ${pdbs.length}`);
  for (const p of pdbs) {
    if (!matches(p.spec.selector.matchLabels, pod.metadata.labels)) out.push("PodDisruptionBudget selects no tally pod");
    if ((dep.spec.replicas ?? 1) === 1 && p.spec.minAvailable !== undefined && Number(p.spec.minAvailable) >= 1) {
      out.push("minAvailable >= 1 with one replica blocks node drains");
    }
  }
  return out;
}

// Shared memory (components/colocated): a container that shares /dev/shm
// with tally shares the same memory-backed volume, sized, and run as the
// same user (the objects clients create are theirs alone, mode 0600).
function sharedMemoryProblems({ pod, c, flags }) {
  const out = [];
  const shmOf = (x) => x.volumeMounts?.find((m) => m.mountPath === "/dev/shm")?.name;
  const sharers = pod.spec.containers.filter((x) => x !== c && shmOf(x));
  if (sharers.length === 0) return out;
  const volume = pod.spec.volumes?.find((v) => v.name === shmOf(c));
  if (!volume) out.push("a sidecar mounts /dev/shm but tally does not");
  for (const x of sharers) {
    if (shmOf(x) !== shmOf(c)) out.push(`container ${x.name} mounts another volume at /dev/shm than tally`);
    if (x.securityContext?.runAsUser !== undefined && x.securityContext.runAsUser !== (c.securityContext?.runAsUser ?? pod.spec.securityContext?.runAsUser)) {
      out.push(`container ${x.name} runs as another user than tally: tally could not open its objects`);
    }
  }
  if (volume && volume.emptyDir?.medium !== "Memory") out.push("the shared /dev/shm must be an emptyDir with medium: Memory");
  const size = quantity(volume?.emptyDir?.sizeLimit);
  if (!Number.isFinite(size)) out.push("the shared /dev/shm needs a sizeLimit");
  const budget = Number(flags.max_region_bytes ?? NaN);
  if (!Number.isFinite(budget) || budget === 0 || budget > size) {
    out.push("--max_region_bytes must be set, and no larger than the shared /dev/shm's sizeLimit");
  }
  return out;
}

function quantity(q) {
  const m = /^(\d+)(Ki|Mi|Gi|Ti)?$/.exec(String(q ?? ""));
  return m ? Number(m[1]) * 1024 ** ({ Ki: 1, Mi: 2, Gi: 3, Ti: 4 }[m[2]] ?? 0) : NaN;
}

// An HPA scales the tally Deployment on a metric some adapter rule serves,
// and owns its count: a `replicas` in the manifest would undo the HPA's
// choice at every apply.
function scalingProblems({ objects, dep }, adapterRules) {
  const out = [];
  for (const h of objects.filter((o) => o.kind === "HorizontalPodAutoscaler")) {
    const ref = h.spec.scaleTargetRef;
    if (ref.kind !== "Deployment" || ref.name !== dep.metadata.name) out.push("HPA does not scale the tally Deployment");
    else if (dep.spec.replicas !== undefined) {
      out.push(`Deployment sets replicas (${dep.spec.replicas}) while HPA ${h.metadata.name} owns the count: each apply would undo the HPA's`);
    }
    for (const m of h.spec.metrics ?? []) {
      if (m.type !== "Pods") continue;
      const name = m.pods.metric.name;
      if (!adapterRules.some((r) => r.servedAs === name)) out.push(`HPA metric ${name} is served by no prometheus-adapter rule`);
    }
  }
  return out;
}

// --dataset_dir (components/durable-datasets): a writable mount of a claim
// in the render, writable by tally's non-root user (fsGroup). A server owns
// its directory alone, and a ReadWriteOnce volume attaches to one node: one
// pod, no HPA, and rollouts that stop the old pod first (Recreate).
function datasetDirProblems({ objects, dep, pod, c, flags }) {
  const out = [];
  if (flags.dataset_dir === undefined) return out;
  const dir = flags.dataset_dir;
  const vol = volumeAt(pod, c, dir);
  if (!vol?.persistentVolumeClaim) {
    out.push(`--dataset_dir=${dir} is not a mounted PersistentVolumeClaim: datasets would not outlive the pod`);
    return out;
  }
  if (vol.readOnly) out.push(`--dataset_dir=${dir} is mounted read-only`);
  if (pod.spec.securityContext?.fsGroup === undefined) out.push("--dataset_dir's volume needs the pod's fsGroup, or tally (non-root) cannot write it");
  const claim = objects.find((o) => o.kind === "PersistentVolumeClaim" && o.metadata.name === vol.persistentVolumeClaim.claimName);
  if (!claim) out.push(`PersistentVolumeClaim ${vol.persistentVolumeClaim.claimName} is not in the render`);
  if ((dep.spec.replicas ?? 1) !== 1) out.push(`--dataset_dir with ${dep.spec.replicas} replicas: one server owns a dataset directory`);
  if (objects.some((o) => o.kind === "HorizontalPodAutoscaler")) {
    out.push("--dataset_dir with an HPA: one server owns a dataset directory, so durable datasets do not combine with replicas");
  }
  if (dep.spec.strategy?.type !== "Recreate") {
    out.push("--dataset_dir needs strategy Recreate: a surged pod would share the directory, and a ReadWriteOnce volume may not attach");
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
