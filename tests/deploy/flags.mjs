// The flags tally-server starts with in a rendered deployment, read the way
// absl reads them: the container's args in order, a --flagfile argument
// standing for the lines of the file it names (here a ConfigMap key mounted
// in the pod). The base's ConfigMap holds the flags to tune; components
// append the flags that belong to their volumes and ports to args.

// {flags: {name: value}, problems: [...]} for the tally container.
export function flagsOf(objects, pod, container) {
  const flags = {};
  const from = {};
  const problems = [];
  const set = (name, value, where) => {
    if (name in flags) problems.push(`--${name} is set in ${from[name]} and again in ${where}: set each flag in one place`);
    flags[name] = value;
    from[name] = where;
  };
  for (const arg of container.args ?? []) {
    const m = /^--([a-z_0-9]+)(?:=(.*))?$/.exec(arg);
    if (!m) {
      problems.push(`argument ${JSON.stringify(arg)} is not --name=value`);
      continue;
    }
    if (m[1] !== "flagfile") {
      set(m[1], m[2] ?? "true", "args");
      continue;
    }
    const text = mountedFile(objects, pod, container, m[2] ?? "");
    if (text === null) {
      problems.push(`--flagfile=${m[2]} is not a key of a ConfigMap mounted in the pod`);
      continue;
    }
    for (const line of text.split("\n")) {
      const f = /^--([a-z_0-9]+)(?:=(.*))?$/.exec(line.trim());
      if (f) set(f[1], f[2] ?? "true", `--flagfile=${m[2]}`);
      else if (line.trim() && !line.trim().startsWith("#")) problems.push(`flag file line ${JSON.stringify(line)} is not --name=value`);
    }
  }
  return { flags, problems };
}

// The text of file at `file` inside the container, when it is a key of a
// ConfigMap volume in the render; null otherwise.
function mountedFile(objects, pod, container, file) {
  for (const m of container.volumeMounts ?? []) {
    if (!file.startsWith(`${m.mountPath}/`)) continue;
    const vol = pod.spec.volumes?.find((v) => v.name === m.name);
    const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === vol?.configMap?.name);
    const key = file.slice(m.mountPath.length + 1);
    if (cm?.data && key in cm.data) return cm.data[key];
  }
  return null;
}
