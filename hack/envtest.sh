#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver and etcd) from the Go module proxy and
# caches it outside the repository, keyed by version. Release binaries cannot be downloaded
# on our machines, but the module proxy serves the sources of both.
#
# Prints the directory holding the binaries, ready for KUBEBUILDER_ASSETS. A second run finds
# the cache and returns at once. Progress goes to stderr.
#
#   KUBEBUILDER_ASSETS=$(hack/envtest.sh) go test ./...
#
# With --kubectl it also builds kubectl of the same version into that directory (a few more
# minutes the first time), for people who want to look at a local control plane, as after
# `make demo`. Tests never need it, so it is not built by default.
set -euo pipefail

with_kubectl=false
case "${1:-}" in
  "") ;;
  --kubectl) with_kubectl=true ;;
  *) echo "usage: $0 [--kubectl]" >&2; exit 2 ;;
esac

KUBE_VERSION=${KUBE_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/botpool/envtest
dest=$cache_root/kube-${KUBE_VERSION}_etcd-${ETCD_VERSION}

log() { printf 'envtest: %s\n' "$*" >&2; }

control_plane() { [ -x "$dest/kube-apiserver" ] && [ -x "$dest/etcd" ]; }
complete() { control_plane && { ! $with_kubectl || [ -x "$dest/kubectl" ]; }; }

if complete; then
  echo "$dest"
  exit 0
fi

mkdir -p "$cache_root"
# Two concurrent callers (make test in two shells) must not both spend ten minutes building.
exec 9>"$cache_root/.lock"
flock 9
if complete; then
  echo "$dest"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod CGO_ENABLED=0 GOWORK=off

# k8s.io/kubernetes requires every staging module at v0.0.0 and replaces them with paths inside
# its own repository; a consumer has to pin each of them to the matching published v0.x.y.
# Writes that module into $1.
kubernetes_module() {
  local mod=$1 staging=0.${KUBE_VERSION#1.}
  mkdir -p "$mod"
  local gomod
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  {
    printf 'module botpool.dev/envtest/kubernetes\n\ngo 1.26\n\nreplace (\n'
    sed -n 's/^[[:space:]]*\(k8s\.io\/[a-z0-9-]*\) v0\.0\.0$/\1/p' "$gomod" | sort -u |
      while read -r m; do printf '\t%s => %s v%s\n' "$m" "$m" "$staging"; done
    printf ')\n'
  } >"$mod/go.mod"
}

# build_kube <command> <output>: one command of k8s.io/kubernetes, stamped with its version.
build_kube() {
  local cmd=$1 out=$2 mod=$work/kubernetes
  [ -f "$mod/go.mod" ] || kubernetes_module "$mod"
  log "building $cmd v$KUBE_VERSION; the first build takes several minutes"
  (cd "$mod" &&
    go get "k8s.io/kubernetes/cmd/$cmd@v$KUBE_VERSION" >&2 &&
    go build -trimpath -o "$out" \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION \
        -X k8s.io/component-base/version.gitMajor=${KUBE_VERSION%%.*} \
        -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2) \
        -X k8s.io/client-go/pkg/version.gitVersion=v$KUBE_VERSION \
        -X k8s.io/client-go/pkg/version.gitMajor=${KUBE_VERSION%%.*} \
        -X k8s.io/client-go/pkg/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)" \
      "k8s.io/kubernetes/cmd/$cmd")
}

build_etcd() {
  local mod=$work/etcd
  mkdir -p "$mod"
  printf 'module botpool.dev/envtest/etcd\n\ngo 1.26\n' >"$mod/go.mod"
  log "building etcd v$ETCD_VERSION"
  (cd "$mod" &&
    go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >&2 &&
    go build -trimpath -o "$work/out/etcd" -ldflags "-s -w" go.etcd.io/etcd/server/v3)
}

if ! control_plane; then
  mkdir -p "$work/out"
  build_etcd
  build_kube kube-apiserver "$work/out/kube-apiserver"
  "$work/out/kube-apiserver" --version >&2
  "$work/out/etcd" --version >&2

  # Publish atomically so an interrupted build never leaves a half-filled cache entry.
  rm -rf "$dest.tmp"
  mv "$work/out" "$dest.tmp"
  mv "$dest.tmp" "$dest"
  log "cached in $dest"
fi

if $with_kubectl && [ ! -x "$dest/kubectl" ]; then
  build_kube kubectl "$work/kubectl"
  "$work/kubectl" version --client >&2
  # The same rule for the added binary: it appears whole or not at all.
  cp "$work/kubectl" "$dest/.kubectl.tmp"
  mv "$dest/.kubectl.tmp" "$dest/kubectl"
  log "kubectl cached in $dest"
fi
echo "$dest"
