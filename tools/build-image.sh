#!/usr/bin/env bash
# Builds deploy/Containerfile into an OCI image with buildah and exports it as an OCI archive.
#
#   tools/build-image.sh [OUT]     OUT: the archive to write (build/image/clef-oci.tar)
#
#   CLEF_IMAGE=NAME       the image's name in buildah's store (localhost/clef:dev)
#   DEBIAN_MIRROR=URL     where debootstrap fetches Debian (http://deb.debian.org/debian)
#
# Where the Containerfile's base images (docker.io/library/debian:12 and :12-slim) cannot be pulled
# (a machine that reaches Debian's archive but no container registry), it first makes them from
# Debian's archive with debootstrap, under the same names, so that the Containerfile builds as it
# is written. Those stand-ins carry the label org.clef.base=debootstrap; they are not Docker Hub's
# images byte for byte (same release and variant, packages as of the day they were made).
#
# Needs root (debootstrap, buildah's vfs store). Prints the archive's size and the image's digest.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-build/image/clef-oci.tar}
IMAGE=${CLEF_IMAGE:-localhost/clef:dev}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CONTAINERFILE=deploy/Containerfile
# vfs: plain directory copies, no overlay mounts, so it works inside an unprivileged container too
BUILDAH=(buildah --storage-driver vfs)

log() { echo "build-image: $*" >&2; }

need() {  # need COMMAND DEBIAN-PACKAGE: install the tool from Debian when it is missing
  command -v "$1" >/dev/null 2>&1 && return
  log "installing $2 (Debian)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >&2
}
need buildah buildah

has_image() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# make_debian NAME: Debian 12 (bookworm) as Docker Hub's debian:12 is made: debootstrap's minbase
# variant, the archive's bookworm, -updates and -security suites, no apt lists or .debs kept.
make_debian() {
  local name=$1 ctr root
  need debootstrap debootstrap
  ctr=$("${BUILDAH[@]}" from scratch)
  root=$("${BUILDAH[@]}" mount "$ctr")
  log "debootstrap --variant=minbase bookworm $MIRROR -> $name"
  debootstrap --variant=minbase bookworm "$root" "$MIRROR" >&2
  rm -f "$root/etc/apt/sources.list"
  cat > "$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: ${MIRROR}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log
  commit_base "$ctr" "$name"
}

# make_slim NAME FROM: FROM without documentation, man pages and locales, and dpkg told not to
# install them again (what debian:12-slim is to debian:12); no second debootstrap.
make_slim() {
  local name=$1 ctr root
  ctr=$("${BUILDAH[@]}" from --quiet --pull=never "$2")
  root=$("${BUILDAH[@]}" mount "$ctr")
  cat > "$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
  find "$root/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{man,groff,info,locale,lintian,linda}/*
  # one layer: deleted files in a layer over debian:12 would still be shipped in the one below
  commit_base "$ctr" "$name" --squash
}

commit_base() {  # the label says where a stand-in came from, so it is never taken for Docker Hub's
  "${BUILDAH[@]}" umount "$1" >/dev/null
  "${BUILDAH[@]}" config --cmd bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --label org.clef.base=debootstrap --label "org.clef.mirror=$MIRROR" "$1"
  "${BUILDAH[@]}" commit --quiet --rm "${@:3}" "$1" "$2" >/dev/null
  log "made $2"
}

# Each base image the Containerfile names: present, pulled, or made (sorted: debian:12, which the
# slim one is made from, comes first).
for base in $(sed -n 's/^FROM[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/p' "$CONTAINERFILE" | sort -u); do
  if has_image "$base"; then
    log "$base: in the local store"
  elif "${BUILDAH[@]}" pull --quiet "$base" >/dev/null 2>&1; then
    log "$base: pulled"
  else
    case "$base" in
      docker.io/library/debian:12) make_debian "$base" ;;
      docker.io/library/debian:12-slim)
        has_image docker.io/library/debian:12 || make_debian docker.io/library/debian:12
        make_slim "$base" docker.io/library/debian:12 ;;
      *) log "$base cannot be pulled and is not a Debian 12 image this script can make"; exit 1 ;;
    esac
  fi
done

# No --layers: vfs keeps each cached layer as a whole copy of the root filesystem (GBs for the
# build stage); the bases made above are the cache that matters.
# chroot isolation: RUN steps need no user/network namespaces or cgroups, which a container as
# this one may not give (the default OCI isolation then fails); --pull=never: the bases are local.
isolation=chroot
if "${BUILDAH[@]}" from --quiet --pull=never --name clef-isolation-probe docker.io/library/debian:12-slim >/dev/null 2>&1 &&
   "${BUILDAH[@]}" run --isolation oci clef-isolation-probe -- true >/dev/null 2>&1; then
  isolation=oci
fi
"${BUILDAH[@]}" rm clef-isolation-probe >/dev/null 2>&1 || true
# the tree's commit for `clef version`: the build stage gets the sources without their .git
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ "$commit" = unknown ] || git diff --quiet HEAD -- || commit="$commit-dirty"
log "building $IMAGE from $commit (isolation $isolation)"
start=$(date +%s)
"${BUILDAH[@]}" build --pull=never --isolation "$isolation" --build-arg "GIT_COMMIT=$commit" -f "$CONTAINERFILE" -t "$IMAGE" .
log "built $IMAGE in $(( $(date +%s) - start )) s"

# Export: an OCI image layout in a tar, the format podman load and skopeo copy oci-archive: read.
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
"${BUILDAH[@]}" push --quiet "$IMAGE" "oci-archive:$OUT:$IMAGE" >/dev/null
echo "image: $IMAGE"
echo "archive: $OUT $(stat -c %s "$OUT") bytes ($(du -h "$OUT" | cut -f1))"
echo "image id: $("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE")"
# the manifest's digest as the archive's index.json records it (what a registry would show)
echo "manifest digest: $(tar -xOf "$OUT" index.json | grep -o '"digest":"sha256:[0-9a-f]*"' | head -1 | cut -d'"' -f4)"
