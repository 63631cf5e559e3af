#!/usr/bin/env bash
# Unit tests of the load tester (tests/loadtest/test_loadtest_unit.py, stdlib unittest) with the
# Debian interpreter when present (its grpc lets the runner tests run; they skip without it).
# Environment: PYTHON (default /usr/bin/python3 if present, else python3).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x /usr/bin/python3 ] && PYTHON=/usr/bin/python3
fi
PYTHONDONTWRITEBYTECODE=1 exec "$PYTHON" "$repo/tests/loadtest/test_loadtest_unit.py"
