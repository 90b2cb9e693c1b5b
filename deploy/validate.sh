#!/usr/bin/env bash
# Validates deploy/ and api-specs/asyncapi.yaml without Docker or a cluster.
#   bash deploy/validate.sh          (or: make deploy-validate)
# The first run installs the validators into a cached virtualenv (PyPI, and
# the npm registry for the AsyncAPI JSON Schemas); every check itself runs
# offline against schemas vendored in those packages. Exits non-zero on the
# first failing step.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${GPUMARKET_VALIDATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpumarket-deploy-validate}
VENV=$CACHE/venv
REQUIREMENTS="check-jsonschema==0.39.0 kubernetes-validate==1.37.0"
ASYNCAPI_SPECS_VERSION=6.11.1
# Oldest and newest Kubernetes minor this deployment is checked against; both
# must be among the versions kubernetes-validate ships (1.25 to 1.37 in 1.37.0).
K8S_VERSIONS=${K8S_VERSIONS:-1.33.0 1.37.0}

step() { printf '== %s\n' "$*"; }

# --- install (network, first run only) ------------------------------------
if [[ ! -x $VENV/bin/python || "$(cat "$VENV/.requirements" 2>/dev/null)" != "$REQUIREMENTS" ]]; then
  step "installing $REQUIREMENTS into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  # shellcheck disable=SC2086  # word splitting of the requirement list is intended
  "$VENV/bin/pip" install --quiet --disable-pip-version-check $REQUIREMENTS
  echo "$REQUIREMENTS" >"$VENV/.requirements"
fi

SPECS=$CACHE/asyncapi-specs-$ASYNCAPI_SPECS_VERSION
ASYNCAPI_SCHEMA=$SPECS/schemas/3.0.0-without-\$id.json
if [[ ! -f $ASYNCAPI_SCHEMA ]] && command -v npm >/dev/null 2>&1; then
  step "fetching @asyncapi/specs@$ASYNCAPI_SPECS_VERSION (the official AsyncAPI JSON Schemas)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "@asyncapi/specs@$ASYNCAPI_SPECS_VERSION" >/dev/null && tar xzf asyncapi-specs-*.tgz)
  rm -rf "$SPECS"
  mv "$tmp/package" "$SPECS"
fi

# --- validate (offline) ---------------------------------------------------
# Any attempt to fetch a schema from the network now fails loudly instead of
# quietly depending on it.
export HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9
export http_proxy=$HTTP_PROXY https_proxy=$HTTPS_PROXY NO_PROXY= no_proxy=
PY=$VENV/bin/python

step "compose: deploy/compose.yaml against the compose-spec schema"
"$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec deploy/compose.yaml
"$PY" deploy/validate.py compose

mapfile -t manifests < <(find deploy/k8s -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml | sort)
for version in $K8S_VERSIONS; do
  step "k8s: ${#manifests[@]} files with kubernetes-validate --strict, Kubernetes $version"
  "$VENV/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}"
  echo "ok -- $(awk '/^kind:/ { n++ } END { print n }' "${manifests[@]}") resources valid"
done
"$PY" deploy/validate.py k8s

step "asyncapi: api-specs/asyncapi.yaml"
if [[ -f $ASYNCAPI_SCHEMA ]]; then
  "$VENV/bin/check-jsonschema" --schemafile "$ASYNCAPI_SCHEMA" api-specs/asyncapi.yaml
else
  echo "SKIPPED the AsyncAPI 3.0.0 schema check: npm is not installed"
fi
"$PY" deploy/validate.py asyncapi

step "all deploy checks passed"
