#!/usr/bin/env bash
# render_report.sh REPORT.html [SHOT.png]
#
# Renders a `harnessflow report --html` file in headless Chromium (Debian's
# `chromium`: apt-get install -y chromium) and fails when the screenshot is
# blank. Without arguments it runs the Go render test instead
# (HF_CHROMIUM_TEST=1 go test -run TestHTMLRendersInChromium ./sinks/report).
set -euo pipefail

if [ $# -eq 0 ]; then
  cd "$(dirname "$0")/../.."
  HF_CHROMIUM_TEST=1 exec go test -count=1 -run TestHTMLRendersInChromium ./sinks/report/
fi

page=$(realpath "$1")
shot=${2:-${page%.html}.png}
bin=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$bin" ]; then
  echo "render_report.sh: chromium not found: apt-get install -y chromium" >&2
  exit 2
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
HOME=$profile timeout 120 "$bin" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$profile" --window-size=1200,1400 --screenshot="$shot" "file://$page" >/dev/null 2>&1 || true
if [ ! -s "$shot" ]; then
  echo "render_report.sh: chromium wrote no screenshot" >&2
  exit 1
fi
# A blank 1200x1400 page compresses to a few KiB; charts and tables do not.
size=$(stat -c %s "$shot")
if [ "$size" -lt 20000 ]; then
  echo "render_report.sh: $shot looks blank ($size bytes)" >&2
  exit 1
fi
echo "rendered $page -> $shot ($size bytes)"
