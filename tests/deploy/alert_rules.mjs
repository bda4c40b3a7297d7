// Runs promtool over tally's alerts. The PrometheusRule is the one source of
// the rules; promtool reads plain rule files, so its spec (the groups) is
// written to a temporary tally-alerts.rules.yaml first.
// Usage: node alert_rules.mjs check   promtool check rules
//        node alert_rules.mjs test    every alert has a case where it fires
//                                     and one where it stays quiet, then
//                                     promtool test rules
//        [--rules=FILE] [--tests=FILE]
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";
import { readDocs } from "./render.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const RULES_NAME = "tally-alerts.rules.yaml";

// The alerting rules of every PrometheusRule in a file: [{alert, expr, ...}].
export function alertsOf(objects) {
  return objects.filter((o) => o.kind === "PrometheusRule")
    .flatMap((o) => o.spec.groups.flatMap((g) => g.rules.filter((r) => r.alert)));
}

// Alerts the unit tests never expect firing, and those never expected quiet.
export function untested(alerts, unitTests) {
  const firing = new Set();
  const quiet = new Set();
  for (const t of unitTests.tests ?? []) {
    for (const a of t.alert_rule_test ?? []) {
      ((a.exp_alerts ?? []).length > 0 ? firing : quiet).add(a.alertname);
    }
  }
  return alerts.flatMap((a) => [
    ...(firing.has(a.alert) ? [] : [`${a.alert} has no test where it fires`]),
    ...(quiet.has(a.alert) ? [] : [`${a.alert} has no test where it stays quiet`]),
  ]);
}

function main() {
  const args = Object.fromEntries(
    process.argv.slice(3).map((a) => a.replace(/^--/, "").split("=")).map(([k, ...v]) => [k, v.join("=")]));
  const mode = process.argv[2];
  const rulesFile = args.rules || path.join(here, "../../deploy/components/monitoring/prometheusrule.yaml");
  const testsFile = args.tests || path.join(here, "alert_rules_test.yaml");
  const rules = readDocs(rulesFile).filter((o) => o.kind === "PrometheusRule");
  if (rules.length !== 1) {
    console.log(`FAIL ${rulesFile}: expected one PrometheusRule, found ${rules.length}`);
    process.exit(1);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tally-alerts-"));
  try {
    fs.writeFileSync(path.join(dir, RULES_NAME), YAML.stringify(rules[0].spec));
    const promtool = (...a) => execFileSync("promtool", a, { cwd: dir, stdio: "inherit" });
    if (mode === "check") {
      promtool("check", "rules", RULES_NAME);
    } else if (mode === "test") {
      const unitTests = YAML.parse(fs.readFileSync(testsFile, "utf8"));
      if (!(unitTests.rule_files ?? []).includes(RULES_NAME)) {
        console.log(`FAIL ${testsFile}: rule_files must name ${RULES_NAME}`);
        process.exit(1);
      }
      // Self-test: an alert without cases must be reported both ways.
      if (untested([{ alert: "Untested" }], unitTests).length !== 2) {
        console.log("FAIL self-test: an alert without tests was not reported");
        process.exit(1);
      }
      const gaps = untested(alertsOf(rules), unitTests);
      for (const g of gaps) console.log(`FAIL ${g}`);
      if (gaps.length) process.exit(1);
      fs.copyFileSync(testsFile, path.join(dir, path.basename(testsFile)));
      promtool("test", "rules", path.basename(testsFile));
      console.log(`${alertsOf(rules).length} alerts, each tested firing and quiet`);
    } else {
      console.log(`unknown mode ${mode}: check or test`);
      process.exit(2);
    }
  } catch (e) {
    // promtool has printed what it found.
    process.exit(e.status ?? 1);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
