// NetworkPolicies over tally's pods (components/network-policy). Once one
// selects a pod for ingress, only what some rule admits gets in, so: the
// gRPC port must be admitted (or clients are cut off), the metrics port only
// from peers narrowed by a selector (Prometheus, not the whole cluster), and
// from something at all when a ServiceMonitor scrapes it; every rule names
// its ports, and only ports the container declares. The kubelet's probes are
// never blocked by NetworkPolicy, so the health-only port needs no rule.

// Whether a peer is narrowed to some pods or namespaces by labels: an empty
// selector matches everything, and an ipBlock is not Prometheus.
function narrowed(peer) {
  const labelled = (s) => s && (Object.keys(s.matchLabels ?? {}).length > 0 || (s.matchExpressions ?? []).length > 0);
  if (peer.ipBlock) return false;
  if (peer.namespaceSelector) return labelled(peer.namespaceSelector);
  return labelled(peer.podSelector); // the policy's own namespace
}

const selects = (selector, labels) =>
  (selector.matchExpressions ?? []).length === 0 &&
  Object.entries(selector.matchLabels ?? {}).every(([k, v]) => labels?.[k] === v);

export function networkPolicyProblems({ objects, pod, c }) {
  const out = [];
  const policies = objects.filter((o) => o.kind === "NetworkPolicy");
  for (const p of policies) {
    if ((p.spec.podSelector.matchExpressions ?? []).length) out.push(`NetworkPolicy ${p.metadata.name}: use matchLabels, which this check reads`);
    else if (!selects(p.spec.podSelector, pod.metadata.labels)) out.push(`NetworkPolicy ${p.metadata.name} selects no tally pod`);
  }
  const ingress = policies.filter((p) => selects(p.spec.podSelector, pod.metadata.labels) &&
    (p.spec.policyTypes ?? ["Ingress"]).includes("Ingress"));
  if (ingress.length === 0) return out;

  // Each rule's ports as container port numbers; a port the container
  // does not declare is a typo that admits nothing.
  const declared = c.ports ?? [];
  const rules = [];
  for (const p of ingress) {
    for (const r of p.spec.ingress ?? []) {
      if (!r.ports?.length) {
        out.push(`NetworkPolicy ${p.metadata.name}: a rule without ports admits every port`);
        continue;
      }
      const ports = [];
      for (const rp of r.ports) {
        const hit = declared.find((d) => d.name === rp.port || d.containerPort === rp.port);
        if (!hit) out.push(`NetworkPolicy ${p.metadata.name}: port ${rp.port} is not a port of the tally container`);
        else ports.push(hit.containerPort);
      }
      rules.push({ policy: p.metadata.name, ports, peers: r.from ?? [] });
    }
  }
  const admitting = (name) => {
    const number = declared.find((d) => d.name === name)?.containerPort;
    return rules.filter((r) => r.ports.includes(number));
  };
  if (admitting("grpc").length === 0) out.push("NetworkPolicies admit no client to the gRPC port");
  for (const r of admitting("metrics")) {
    if (r.peers.length === 0 || !r.peers.every(narrowed)) {
      out.push(`NetworkPolicy ${r.policy} admits more than Prometheus to the metrics port (narrow it with a namespace or pod selector)`);
    }
  }
  if (objects.some((o) => o.kind === "ServiceMonitor") && admitting("metrics").length === 0) {
    out.push("a ServiceMonitor scrapes the metrics port, which no NetworkPolicy admits Prometheus to");
  }
  if (declared.some((d) => d.name === "health") && admitting("health").length > 0) {
    out.push("a NetworkPolicy admits peers to the health-only port: only the kubelet probes it, and it is never blocked");
  }
  return out;
}
