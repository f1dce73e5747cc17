#!/bin/sh
# screenshot.sh HTML PNG [WIDTH HEIGHT] — render a page (the tuning report)
# in headless Chromium with nothing that reaches the network (no
# background networking, component updates, sync or QUIC; a fresh
# profile), and write a screenshot of its top WIDTHxHEIGHT pixels (default
# 1280x3000). `make report-demo` runs it; the page needs no network.
set -eu
html=$1 png=$2 w=${3:-1280} h=${4:-3000}
chromium=${GCORE_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$chromium" ]; then
  echo "screenshot.sh: no chromium on PATH (Debian: apt-get install chromium; make deps installs it)" >&2
  exit 3
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
case $html in /*) url=file://$html ;; *) url=file://$PWD/$html ;; esac
case $png in /*) out=$png ;; *) out=$PWD/$png ;; esac
rm -f "$out"
timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --hide-scrollbars --window-size="$w,$h" --screenshot="$out" \
  "$url" >"$profile/log" 2>&1 || { tail -5 "$profile/log" >&2; exit 1; }
[ -s "$out" ] || { echo "screenshot.sh: chromium wrote no $out" >&2; tail -5 "$profile/log" >&2; exit 1; }
echo "screenshot: $png (${w}x${h})"
