#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job on the embedded demo model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
./build/tools/cli/k3 info models/tiny-k3
