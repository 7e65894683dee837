#!/usr/bin/env bash
# Installs Chromium from the system packages (Debian/Ubuntu), for the report's rendering tests
# (tests/test_report_opening.py: the first screen holds the opening table; a 1280-px screenshot of the report).
# Without it those tests skip, except under CI=true, where a missing browser fails them.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
sudo_=""
if [ "$(id -u)" != 0 ]; then sudo_=sudo; fi
$sudo_ apt-get update
$sudo_ apt-get install -y --no-install-recommends chromium
chromium --version
