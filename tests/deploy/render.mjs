// A small kustomize renderer for the features deploy/ uses, so the manifests
// can be rendered where no kustomize binary exists. Scope (anything else in a
// kustomization.yaml is an error, never silently ignored):
//   resources   files (one or more YAML documents) and directories holding a
//               Kustomization, rendered recursively
//   components  directories holding a Component (kind: Component): its
//               resources join what the including kustomization has gathered
//               so far, then its components, patches, images and namespace
//               apply to all of it, in the order listed (kustomize's order)
//   namespace   set on every object
//   images      name -> newName / newTag / digest, on containers and
//               initContainers of pod templates
//   patches     `path:` to a strategic merge patch that names its target by
//               apiVersion, kind and metadata.name; maps merge recursively,
//               null deletes, lists of containers / initContainers / volumes
//               / env / volumeMounts (keyed by name or mountPath) and ports
//               (keyed by containerPort or port) merge by key (the patch's
//               items first, then the rest, as kustomize orders them), other
//               lists are replaced, as Kubernetes' patchMergeKey tags say;
//               or `path:` to a JSON patch (RFC 6902: add, remove, replace,
//               test) with a `target:` of kind and name, which is how a
//               component appends to a list (tally's args) that a strategic
//               merge would replace whole.
// validate.mjs checks this renderer against `kubectl kustomize` wherever
// kubectl is installed.
import fs from "node:fs";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import YAML from "yaml";

const SUPPORTED = new Set(["apiVersion", "kind", "resources", "components", "namespace", "images", "patches"]);
const KINDS = {
  Kustomization: "kustomize.config.k8s.io/v1beta1",
  Component: "kustomize.config.k8s.io/v1alpha1",
};
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
    // kustomize's order: the patch's items first, in the patch's order
    // (merged into the target's item of the same key, if any), then the
    // target's items the patch does not name.
    const out = patch.map((p) => {
      const t = target.find((x) => x[key] === p[key]);
      return t ? strategicMerge(structuredClone(t), p) : structuredClone(p);
    });
    for (const t of target) {
      if (!patch.some((p) => p[key] === t[key])) out.push(structuredClone(t));
    }
    return out;
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

// RFC 6901 pointer -> path segments.
function pointer(p) {
  if (p === "") return [];
  if (!p.startsWith("/")) throw new Error(`JSON pointer ${p} must start with /`);
  return p.slice(1).split("/").map((x) => x.replace(/~1/g, "/").replace(/~0/g, "~"));
}

// Applies one RFC 6902 patch (add, remove, replace, test) to a copy of obj.
export function jsonPatch(obj, ops, where) {
  const out = structuredClone(obj);
  for (const op of ops) {
    const segs = pointer(op.path);
    const last = segs.pop();
    let parent = out;
    for (const s of segs) {
      parent = Array.isArray(parent) ? parent[Number(s)] : parent?.[s];
      if (parent === undefined || parent === null || typeof parent !== "object") {
        throw new Error(`${where}: ${op.op} ${op.path}: no such path`);
      }
    }
    const index = Array.isArray(parent) ? (last === "-" ? parent.length : Number(last)) : null;
    const has = Array.isArray(parent) ? index >= 0 && index < parent.length : last in parent;
    switch (op.op) {
      case "add":
        if (Array.isArray(parent)) {
          if (!(index >= 0 && index <= parent.length)) throw new Error(`${where}: add ${op.path}: index out of range`);
          parent.splice(index, 0, structuredClone(op.value));
        } else parent[last] = structuredClone(op.value);
        break;
      case "replace":
      case "remove":
        if (!has) throw new Error(`${where}: ${op.op} ${op.path}: no such path`);
        if (Array.isArray(parent)) parent.splice(index, 1, ...(op.op === "replace" ? [structuredClone(op.value)] : []));
        else if (op.op === "replace") parent[last] = structuredClone(op.value);
        else delete parent[last];
        break;
      case "test":
        if (!has || !isDeepStrictEqual(Array.isArray(parent) ? parent[index] : parent[last], op.value)) {
          throw new Error(`${where}: test ${op.path} == ${JSON.stringify(op.value)} failed`);
        }
        break;
      default:
        throw new Error(`${where}: JSON patch op "${op.op}" is outside this renderer's scope`);
    }
  }
  return out;
}

function applyPatches(k, kfile, dir, objects) {
  for (const entry of k.patches ?? []) {
    const keys = Object.keys(entry ?? {}).sort().join(",");
    if (keys !== "path" && keys !== "path,target") {
      throw new Error(`${kfile}: only "patches: - path: FILE" (with an optional target) is supported`);
    }
    const file = path.resolve(dir, entry.path);
    if (entry.target) {
      // A JSON patch: a list of operations, applied to each object the
      // target names (kind and name, as used here).
      const t = entry.target;
      const extra = Object.keys(t).filter((x) => !["kind", "name"].includes(x));
      if (!t.kind || !t.name || extra.length) throw new Error(`${kfile}: a patch target must give kind and name only`);
      const ops = YAML.parse(fs.readFileSync(file, "utf8"));
      if (!Array.isArray(ops)) throw new Error(`${kfile}: ${entry.path} with a target must be a JSON patch (a list of operations)`);
      const hits = objects.filter((o) => o.kind === t.kind && o.metadata?.name === t.name);
      if (hits.length === 0) throw new Error(`${kfile}: patch ${entry.path} matches no object`);
      for (const h of hits) objects[objects.indexOf(h)] = jsonPatch(h, ops, `${kfile}: ${entry.path}`);
      continue;
    }
    for (const patch of readDocs(file)) {
      const hits = objects.filter(
        (o) => o.apiVersion === patch.apiVersion && o.kind === patch.kind &&
          o.metadata?.name === patch.metadata?.name);
      if (hits.length !== 1) {
        throw new Error(`${kfile}: patch ${entry.path} matches ${hits.length} objects`);
      }
      objects[objects.indexOf(hits[0])] = strategicMerge(hits[0], patch);
    }
  }
  return objects;
}

function readKustomization(dir, kind) {
  const kfile = findKustomization(dir);
  const [k] = readDocs(kfile);
  for (const field of Object.keys(k)) {
    if (!SUPPORTED.has(field)) throw new Error(`${kfile}: field "${field}" is outside this renderer's scope`);
  }
  const own = k.kind ?? "Kustomization";
  if (own !== kind) throw new Error(`${kfile}: a ${own} where a ${kind} belongs`);
  if ((k.apiVersion ?? KINDS.Kustomization) !== KINDS[kind]) {
    throw new Error(`${kfile}: a ${kind} is apiVersion ${KINDS[kind]}, not ${k.apiVersion}`);
  }
  return { k, kfile };
}

// Resources, then components, then this kustomization's own patches, images
// and namespace over everything gathered: how kustomize builds both a
// Kustomization and a Component (whose `objects` are its includer's).
function build(dir, kind, objects) {
  const { k, kfile } = readKustomization(dir, kind);
  for (const r of k.resources ?? []) {
    const p = path.resolve(dir, r);
    if (fs.statSync(p).isDirectory()) objects.push(...render(p));
    else objects.push(...readDocs(p));
  }
  for (const c of k.components ?? []) objects = build(path.resolve(dir, c), "Component", objects);
  objects = applyPatches(k, kfile, dir, objects);
  if (k.images) objects.forEach((o) => setImages(o, k.images));
  if (k.namespace) {
    objects = objects.map((o) => ({ ...o, metadata: { ...o.metadata, namespace: k.namespace } }));
  }
  return objects;
}

// Whether dir holds a Component (rendered only by a kustomization that
// lists it) rather than a Kustomization.
export function isComponent(dir) {
  const [k] = readDocs(findKustomization(dir));
  return k.kind === "Component";
}

export function render(dir) {
  return build(dir, "Kustomization", []);
}
