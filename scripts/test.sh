#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs the unit and integration suites.
#   scripts/test.sh            unit + integration tests
#   SPECDEC_SLOW=1 scripts/test.sh   also the tests labelled `slow`
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
labels='unit|integration'
if [ "${SPECDEC_SLOW:-0}" = 1 ]; then labels='unit|integration|slow'; fi
ctest --test-dir "${BUILD_DIR:-build}" -L "$labels" --output-on-failure -j "$(nproc)" --timeout 900
