// Every combination of deploy/components over deploy/base, as deploy/README.md
// promises: any set of components renders, and each passes the checks except
// the sets EXCLUSIVE names, which the checks must refuse. Each combination is
// a kustomization written to a temporary directory, so kubectl kustomize can
// render it too.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { isComponent } from "./render.mjs";

// Components that must not be combined, and why; the checks must say so.
export const EXCLUSIVE = [
  { components: ["durable-datasets", "replicas"],
    why: "one server owns a dataset directory, on a volume that attaches to one node" },
];

export function componentNames(deployDir) {
  const dir = path.join(deployDir, "components");
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory() && isComponent(path.join(dir, e.name)))
    .map((e) => e.name).sort();
}

// Every subset of names, the empty one first.
export function subsets(names) {
  const out = [];
  for (let mask = 0; mask < 1 << names.length; mask++) {
    out.push(names.filter((_, i) => mask & (1 << i)));
  }
  return out;
}

export const excluded = (set) => EXCLUSIVE.find((x) => x.components.every((c) => set.includes(c))) ?? null;

// Writes a kustomization of base + these components (in this order) under
// a new temporary directory and returns that directory.
export function writeCombination(deployDir, components) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tally-combination-"));
  const rel = (p) => path.relative(dir, path.join(deployDir, p));
  const text = [
    "apiVersion: kustomize.config.k8s.io/v1beta1",
    "kind: Kustomization",
    "namespace: tally",
    "resources:",
    `  - ${rel("base")}`,
    ...(components.length ? ["components:", ...components.map((c) => `  - ${rel(`components/${c}`)}`)] : []),
    "",
  ].join("\n");
  fs.writeFileSync(path.join(dir, "kustomization.yaml"), text);
  return dir;
}
