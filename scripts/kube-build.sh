#!/usr/bin/env bash
# Builds, once, what kube-in-a-box runs (scripts/vpc-box.sh up --kube), into the kube cache
# ($VPC_CNI_KUBE_CACHE, default ~/.cache/vpc-cni/kube), from Debian's archive only:
#   bin/kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#       Kubernetes built from Debian's `kubernetes` source package (upstream v1.20.2)
#   bin/kubectl                      Debian's kubernetes-client
#   bin/etcd                         Debian's etcd-server
#   bin/containerd, containerd-shim-runc-v2, ctr    Debian's containerd (1.6)
#   bin/runc                         Debian's runc
#   images/pause.tar, images/busybox.tar
#       OCI layout tarballs (localhost/pause:box, localhost/busybox:box) of Debian's
#       busybox-static, for `ctr images import`
#
#   kube-build.sh           builds what is missing (about 8 min of CPU from cold), then
#                           prints the cache directory on stdout
#   kube-build.sh --check   builds nothing; fails naming what is missing
#
# Nothing is installed on the machine beyond build tools (golang-go, gcc, busybox-static):
# the runtime packages are unpacked into the cache, so no containerd or etcd service starts.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BIN=$KUBE_CACHE/bin
IMAGES=$KUBE_CACHE/images
BUILT=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
# Bumped whenever the way they are built changes, so a cache built the old way is rebuilt.
# 2: Debian's reflect2 1.0.2 replaces the vendored 1.0.1.
RECIPE=2
# Binary in the cache, Debian package, path in the package.
UNPACKED=(
  "kubectl kubernetes-client usr/bin/kubectl"
  "etcd etcd-server usr/bin/etcd"
  "containerd containerd usr/bin/containerd"
  "containerd-shim-runc-v2 containerd usr/bin/containerd-shim-runc-v2"
  "ctr containerd usr/bin/ctr"
  "runc runc usr/sbin/runc"
)

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# The recipe the Kubernetes binaries in the cache were built with.
built_recipe() { cat "$BIN/.recipe" 2>/dev/null || echo 1; }

missing() {
  local b entry
  for b in "${BUILT[@]}"; do
    if [ ! -x "$BIN/$b" ]; then
      echo "bin/$b"
    elif [ "$(built_recipe)" != "$RECIPE" ]; then
      echo "bin/$b (built by recipe $(built_recipe), not $RECIPE)"
    fi
  done
  for entry in "${UNPACKED[@]}"; do
    read -r b _ _ <<<"$entry"
    [ -x "$BIN/$b" ] || echo "bin/$b"
  done
  for b in pause busybox; do [ -f "$IMAGES/$b.tar" ] || echo "images/$b.tar"; done
}

# Unpacks the runtime binaries from their Debian packages (apt-get download + dpkg-deb -x).
unpack_debs() {
  local build=$1 entry b pkg path
  local -A wanted=()
  for entry in "${UNPACKED[@]}"; do
    read -r b pkg _ <<<"$entry"
    [ -x "$BIN/$b" ] || wanted[$pkg]=1
  done
  [ ${#wanted[@]} -gt 0 ] || return 0
  say "unpacking Debian's ${!wanted[*]} into $BIN"
  mkdir -p "$build/debs" "$build/root"
  (cd "$build/debs" && apt-get download -qq "${!wanted[@]}" >&2) \
    || die "could not download ${!wanted[*]} (apt-get download)"
  for pkg in "$build"/debs/*.deb; do
    dpkg-deb -x "$pkg" "$build/root"
    # shellcheck disable=SC2016 # dpkg's format, not the shell's
    dpkg-deb -W --showformat='${Package} ${Version}\n' "$pkg" >>"$KUBE_CACHE/versions"
  done
  for entry in "${UNPACKED[@]}"; do
    read -r b pkg path <<<"$entry"
    [ -x "$BIN/$b" ] && continue
    [ -x "$build/root/$path" ] || die "Debian's $pkg has no $path"
    install -m 755 "$build/root/$path" "$BIN/.$b.tmp"
    mv "$BIN/.$b.tmp" "$BIN/$b"
  done
}

# Kubernetes v1.20 from Debian's source package. Its .orig tarball is the whole upstream tree
# with vendor/ and staging/, which builds offline in GOPATH mode (module mode refuses the
# vendored tree); only the OpenAPI definitions kube-apiserver needs are not in it.
build_kube() {
  local build=$1 src tree version major minor b cgo ldflags
  local todo=()
  for b in "${BUILT[@]}"; do
    [ -x "$BIN/$b" ] && [ "$(built_recipe)" = "$RECIPE" ] || todo+=("$b")
  done
  [ ${#todo[@]} -gt 0 ] || return 0
  ensure_deb_src
  install_packages golang-go gcc libc6-dev golang-github-modern-go-reflect2-dev
  say "downloading Debian's kubernetes source package"
  (cd "$build" && apt-get source --download-only -qq kubernetes >&2) \
    || die "could not download the kubernetes source package (apt-get source)"
  tar -C "$build" -xzf "$build"/kubernetes_*.orig.tar.gz
  src=$(find "$build" -maxdepth 1 -type d -name 'kubernetes-*' | head -n 1)
  [ -d "$src/cmd/kubelet" ] || die "the kubernetes source package has no cmd/kubelet"
  version=v${src##*/kubernetes-}
  [[ $version =~ ^v([0-9]+)\.([0-9]+)\. ]] || die "cannot tell the Kubernetes version from $src"
  major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
  mkdir -p "$build/gopath/src/k8s.io"
  ln -s "$src" "$build/gopath/src/k8s.io/kubernetes"
  tree=$build/gopath/src/k8s.io/kubernetes
  # The vendored reflect2 1.0.1 iterates maps with a layout Go 1.18 changed: built with
  # Debian's Go 1.19, kube-apiserver dies (SIGSEGV in mapiterinit) the first time it encodes
  # a custom resource. Debian's reflect2 1.0.2 has the fix and the same API.
  local reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
  [ -f "$reflect2/reflect2.go" ] || die "Debian's golang-github-modern-go-reflect2-dev is not installed at $reflect2"
  rm -rf "$src/vendor/github.com/modern-go/reflect2"
  cp -r "$reflect2" "$src/vendor/github.com/modern-go/reflect2"
  export GO111MODULE=off GOPATH=$build/gopath GOCACHE=$build/gocache GOFLAGS=
  # Only kube-apiserver needs the OpenAPI definitions.
  if [[ " ${todo[*]} " == *" kube-apiserver "* ]]; then (cd "$tree" && gen_openapi "$build"); fi
  # The vendor path: in GOPATH mode the package lives under k8s.io/kubernetes/vendor, and the
  # plain path would leave the binaries saying v0.0.0-master.
  local pkg=k8s.io/kubernetes/vendor/k8s.io/component-base/version
  ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=archive"
  for b in "${todo[@]}"; do
    # kubelet needs cgo (it links libc for its mount and user lookups); the rest are static.
    cgo=0; [ "$b" = kubelet ] && cgo=1
    say "building $b $version (niced; minutes)"
    (cd "$tree" && CGO_ENABLED=$cgo nice -n 10 go build -ldflags "$ldflags" -o "$BIN/.$b.tmp" "./cmd/$b") \
      || die "could not build $b"
    mv "$BIN/.$b.tmp" "$BIN/$b"
  done
  echo "$RECIPE" >"$BIN/.recipe"
  echo "kubernetes $version (Debian source $(basename "$build"/kubernetes_*.dsc .dsc)), recipe $RECIPE" >>"$KUBE_CACHE/versions"
}

# pkg/generated/openapi for kube-apiserver: openapi-gen over every package tagged
# `+k8s:openapi-gen=`, found as upstream's Makefile.generated_files finds them (staging named
# by its vendor path; code-generator's and sample-apiserver's left out).
gen_openapi() {
  local build=$1 dirs
  [ -f pkg/generated/openapi/zz_generated.openapi.go ] && return 0
  say "generating the OpenAPI definitions (openapi-gen)"
  nice -n 10 go build -o "$build/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  dirs=$(find -H . \( -path ./vendor -o -path './_*' -o -path './.*' \) -prune -o -type f -name '*.go' -print \
    | { xargs grep -l '^// *+k8s:' || true; } | { xargs grep -l '+k8s:openapi-gen=' || true; } \
    | sed 's|^\./staging/src|vendor|; s|^\./||; s|/[^/]*$||' \
    | grep -vE '^vendor/k8s\.io/(code-generator|sample-apiserver)/' | LC_ALL=C sort -u \
    | sed 's|^|k8s.io/kubernetes/|' | paste -sd,)
  [ -n "$dirs" ] || die "found no package tagged +k8s:openapi-gen="
  "$build/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$build/openapi-violations.report" >&2 || die "openapi-gen failed"
}

# A single-layer image of busybox-static: /bin/busybox with a link per applet.
build_image() { # work ref config-json out
  local work=$1 ref=$2 config=$3 out=$4 busybox applet
  busybox=$(dpkg -L busybox-static 2>/dev/null | grep -m1 '/bin/busybox$') \
    || die "busybox-static is not installed"
  rm -rf "$work"; mkdir -p "$work/rootfs/bin" "$work/rootfs/etc" "$work/rootfs/tmp"
  install -m 755 "$busybox" "$work/rootfs/bin/busybox"
  for applet in $("$busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$work/rootfs/bin/$applet"
  done
  echo 'root:x:0:0:root:/:/bin/sh' >"$work/rootfs/etc/passwd"
  echo 'root:x:0:' >"$work/rootfs/etc/group"
  chmod 1777 "$work/rootfs/tmp"
  # Reproducible: the same busybox gives the same digests, and both images share the layer.
  layer_tar "$work/rootfs" "$work/layer.tar"
  oci_archive "$work" "$ref" "$config" "$out" "$work/layer.tar"
}

build_images() {
  local build=$1
  if [ ! -f "$IMAGES/pause.tar" ] || [ ! -f "$IMAGES/busybox.tar" ]; then
    ensure_packages jq:jq
    dpkg -L busybox-static >/dev/null 2>&1 || install_packages busybox-static
  fi
  if [ ! -f "$IMAGES/pause.tar" ]; then
    say "building localhost/pause:box (busybox-static)"
    # The sandbox only holds the pod's namespaces; containerd stops it with SIGKILL.
    build_image "$build/pause" localhost/pause:box \
      '{"Entrypoint": ["/bin/sleep", "infinity"], "Env": ["PATH=/bin"]}' "$IMAGES/pause.tar"
  fi
  if [ ! -f "$IMAGES/busybox.tar" ]; then
    say "building localhost/busybox:box (busybox-static)"
    build_image "$build/busybox" localhost/busybox:box \
      '{"Cmd": ["sh"], "Env": ["PATH=/bin"]}' "$IMAGES/busybox.tar"
  fi
}

check=0
case ${1:-} in
  "") ;;
  --check) check=1;;
  *) usage;;
esac

absent=$(missing)
if [ -z "$absent" ]; then
  echo "$KUBE_CACHE"
  exit 0
fi
if [ $check -eq 1 ]; then
  die "the kube cache $KUBE_CACHE lacks: $(echo "$absent" | paste -sd' ') (build it with $0, as root)"
fi
[ "$(id -u)" -eq 0 ] || die "the kube cache $KUBE_CACHE lacks: $(echo "$absent" | paste -sd' ') (run $0 as root to build it)"
mkdir -p "$BIN" "$IMAGES"
BUILD=$(mktemp -d "$KUBE_CACHE/build.XXXXXX")
# apt-get source and download fetch as the _apt user where they can.
chmod 755 "$BUILD"
trap 'rm -rf "$BUILD"' EXIT
unpack_debs "$BUILD"
build_images "$BUILD"
build_kube "$BUILD"
absent=$(missing)
[ -z "$absent" ] || die "still missing after the build: $(echo "$absent" | paste -sd' ')"
rm -rf "$BUILD"
trap - EXIT
say "kube cache ready: $KUBE_CACHE ($(du -sh "$KUBE_CACHE" | cut -f1))"
echo "$KUBE_CACHE"
