// A small kustomize renderer for the features deploy/ uses, so the manifests
// can be rendered where no kustomize binary exists. Scope (anything else in a
// kustomization.yaml is an error, never silently ignored):
//   resources   files (one or more YAML documents) and directories holding a
//               kustomization.yaml, rendered recursively
//   namespace   set on every object
//   images      name -> newName / newTag / digest, on containers and
//               initContainers of pod templates
//   patches     `path:` to a strategic merge patch that names its target by
//               apiVersion, kind and metadata.name; maps merge recursively,
//               null deletes, lists of containers / initContainers / volumes
//               / env / volumeMounts (keyed by name or mountPath) and ports
//               (keyed by containerPort or port) merge by key, new items
//               first, other lists are replaced, as Kubernetes'
//               patchMergeKey tags say.
// validate.mjs checks this renderer against `kubectl kustomize` wherever
// kubectl is installed.
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";

const SUPPORTED = new Set(["apiVersion", "kind", "resources", "namespace", "images", "patches"]);
// patchMergeKey of the Kubernetes lists the manifests patch.
const MERGE_KEYS = {
  containers: "name",
  initContainers: "name",
  volumes: "name",
  env: "name",
  volumeMounts: "mountPath",
  ports: ["containerPort", "port"],
  tolerations: null, // atomic in Kubernetes: replaced
};

export function readDocs(file) {
  return YAML.parseAllDocuments(fs.readFileSync(file, "utf8")).map((d) => {
    if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
    return d.toJS();
  }).filter((o) => o !== null && o !== undefined);
}

function findKustomization(dir) {
  for (const n of ["kustomization.yaml", "kustomization.yml", "Kustomization"]) {
    const p = path.join(dir, n);
    if (fs.existsSync(p)) return p;
  }
  throw new Error(`${dir}: no kustomization.yaml`);
}

function mergeKeyOf(field, a, b) {
  const k = MERGE_KEYS[field];
  if (!k) return null;
  const keys = Array.isArray(k) ? k : [k];
  return keys.find((key) => [...a, ...b].every((x) => x && typeof x === "object" && key in x)) ?? null;
}

export function strategicMerge(target, patch, field = "") {
  if (patch === null) return undefined;
  if (Array.isArray(patch)) {
    if (!Array.isArray(target)) return structuredClone(patch);
    const key = mergeKeyOf(field, target, patch);
    if (!key) return structuredClone(patch);
    const out = target.map((x) => structuredClone(x));
    const added = [];
    for (const p of patch) {
      const i = out.findIndex((x) => x[key] === p[key]);
      if (i >= 0) out[i] = strategicMerge(out[i], p);
      else added.push(structuredClone(p));
    }
    // As kustomize does: items the target lacked come first, in patch order.
    return [...added, ...out];
  }
  if (typeof patch === "object") {
    if (field === "$patch") throw new Error("$patch directives are not supported");
    const out = target && typeof target === "object" && !Array.isArray(target) ? { ...target } : {};
    for (const [k, v] of Object.entries(patch)) {
      if (k.startsWith("$")) throw new Error(`${k} directives are not supported`);
      const merged = strategicMerge(out[k], v, k);
      if (merged === undefined) delete out[k];
      else out[k] = merged;
    }
    return out;
  }
  return patch;
}

function setImages(obj, images) {
  const spec = obj.spec?.template?.spec ?? (obj.kind === "Pod" ? obj.spec : null);
  if (!spec) return;
  for (const c of [...(spec.containers ?? []), ...(spec.initContainers ?? [])]) {
    const m = /^(.*?)(?::([^:/@]+))?(?:@(.+))?$/.exec(c.image);
    const name = m[1];
    const img = images.find((i) => i.name === name);
    if (!img) continue;
    let out = img.newName ?? name;
    if (img.digest) out += `@${img.digest}`;
    else if (img.newTag !== undefined) out += `:${img.newTag}`;
    else if (m[2]) out += `:${m[2]}`;
    c.image = out;
  }
}

export function render(dir) {
  const kfile = findKustomization(dir);
  const [k] = readDocs(kfile);
  for (const field of Object.keys(k)) {
    if (!SUPPORTED.has(field)) throw new Error(`${kfile}: field "${field}" is outside this renderer's scope`);
  }
  let objects = [];
  for (const r of k.resources ?? []) {
    const p = path.resolve(dir, r);
    if (fs.statSync(p).isDirectory()) objects.push(...render(p));
    else objects.push(...readDocs(p));
  }
  for (const entry of k.patches ?? []) {
    if (typeof entry !== "object" || !entry.path || Object.keys(entry).length !== 1) {
      throw new Error(`${kfile}: only "patches: - path: FILE" is supported`);
    }
    for (const patch of readDocs(path.resolve(dir, entry.path))) {
      const hits = objects.filter(
        (o) => o.apiVersion === patch.apiVersion && o.kind === patch.kind &&
          o.metadata?.name === patch.metadata?.name);
      if (hits.length !== 1) {
        throw new Error(`${kfile}: patch ${entry.path} matches ${hits.length} objects`);
      }
      objects[objects.indexOf(hits[0])] = strategicMerge(hits[0], patch);
    }
  }
  if (k.images) objects.forEach((o) => setImages(o, k.images));
  if (k.namespace) {
    objects = objects.map((o) => ({ ...o, metadata: { ...o.metadata, namespace: k.namespace } }));
  }
  return objects;
}
