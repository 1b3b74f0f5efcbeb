#!/usr/bin/env bash
# Installs a Go tool at a pinned version into a cache path named after that version:
#   hack/install-tool.sh <destination> <package@version>
# The build lands in a temporary GOBIN and is moved into place only when complete.
set -euo pipefail
dest=$1 pkg=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "installing $pkg" >&2
GOBIN=$tmp GOFLAGS= GOWORK=off go install "$pkg"
mkdir -p "$(dirname "$dest")"
mv "$tmp/$(basename "${pkg%@*}")" "$dest"
