#!/usr/bin/env bash
# ctest driver for the deploy checks (node project in this folder).
#   run_checks.sh npm-ci                      install node_modules from the lock file
#   run_checks.sh manifests SCRAPE_CMD...     render + validate every kustomization
#   run_checks.sh dashboard SCRAPE_CMD... [-- DASHBOARD_ARGS]
#   run_checks.sh alert-rules-check           promtool check rules on the alerts
#   run_checks.sh alert-rules-test            promtool test rules (alert_rules_test.yaml)
# SCRAPE_CMD prints a /metrics scrape (tally-metrics-sample, or
# scrape_server.py around a running tally-server).
# Exits 77 (ctest: skipped) when node or npm, or for the alert rules
# promtool, is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

need_node() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "SKIP: node and npm are needed for the deploy checks (scripts/install-deps.sh installs them)"
    exit 77
  fi
}

mode="$1"; shift
need_node
case "$mode" in
  npm-ci)
    npm ci --prefer-offline --no-audit --no-fund --loglevel=error
    ;;
  manifests|dashboard)
    if [ ! -d node_modules/kubernetes-models ]; then
      echo "node_modules missing: run the deploy_npm_ci test first"; exit 1
    fi
    scrape="$(mktemp)"; trap 'rm -f "$scrape"' EXIT
    cmd=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmd+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    "${cmd[@]}" > "$scrape"
    if [ "$mode" = manifests ]; then
      node validate.mjs --scrape="$scrape" "$@"
    else
      node dashboard.mjs --scrape="$scrape" "$@"
    fi
    ;;
  alert-rules-check|alert-rules-test)
    if ! command -v promtool >/dev/null 2>&1; then
      echo "SKIP: promtool is needed for the alert rule checks (Debian package prometheus; scripts/install-deps.sh installs it)"
      exit 77
    fi
    if [ ! -d node_modules/yaml ]; then
      echo "node_modules missing: run the deploy_npm_ci test first"; exit 1
    fi
    node alert_rules.mjs "${mode#alert-rules-}"
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
