#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job on the embedded demo model:
# K3-mini (models/k3-mini, a 5.2M-parameter K3-architecture model trained on the KJV Bible)
# continues a prompt, streaming tokens; stats go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
./build/tools/cli/k3 run -m models/k3-mini -p "And God said" -n 96 "$@"
