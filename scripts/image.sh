#!/usr/bin/env bash
# Builds Plexus's container image as an OCI archive from what is on this machine (no registry, no container builder):
# this machine's Node runtime and its shared libraries, busybox, the built daemon/CLI/installer, the production npm
# packages and the static shim. Prints the archive's path on its last line; import it with
#   ctr -n k8s.io images import "$(bash scripts/image.sh | tail -1)"
# Flags go to dist/scripts/build-image.js: --name NAME (default local.test/plexus:<version>), --out DIR.
# PLEXUS_IMAGE_SKIP_BUILD=1 uses the existing build (dist/, bin/plexus-cni) as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PLEXUS_IMAGE_SKIP_BUILD:-}" ]; then
  npm run --silent build >&2
fi
exec node dist/scripts/build-image.js "$@"
