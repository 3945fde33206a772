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

# make_debian NAME [slim]: Debian 12 (bookworm) as Docker Hub's debian images are made: debootstrap's
# minbase variant, the archive's bookworm, -updates and -security suites, no apt lists or .debs kept.
# slim also drops documentation, man pages and locales and tells dpkg not to install them again
# (what debian:12-slim does).
make_debian() {
  local name=$1 slim=${2:-} ctr root
  need debootstrap debootstrap
  ctr=$("${BUILDAH[@]}" from scratch)
  root=$("${BUILDAH[@]}" mount "$ctr")
  log "debootstrap --variant=minbase bookworm $MIRROR -> $name"
  debootstrap --variant=minbase bookworm "$root" "$MIRROR" >&2
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
  rm -f "$root/etc/apt/sources.list"
  if [ "$slim" = slim ]; then
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
    find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$root"/usr/share/{man,groff,info,locale,lintian,linda}/*
  fi
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
  "${BUILDAH[@]}" config --cmd bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --label org.clef.base=debootstrap --label "org.clef.mirror=$MIRROR" "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$name" >/dev/null
  log "made $name"
}

# Each base image the Containerfile names: present, pulled, or made (one debootstrap each).
for base in $(sed -n 's/^FROM[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/p' "$CONTAINERFILE" | sort -u); do
  if has_image "$base"; then
    log "$base: in the local store"
  elif "${BUILDAH[@]}" pull --quiet "$base" >/dev/null 2>&1; then
    log "$base: pulled"
  else
    case "$base" in
      docker.io/library/debian:12) make_debian "$base" ;;
      docker.io/library/debian:12-slim) make_debian "$base" slim ;;
      *) log "$base cannot be pulled and is not a Debian 12 image this script can make"; exit 1 ;;
    esac
  fi
done

# chroot isolation: RUN steps need no user/network namespaces or cgroups, which a container as
# this one may not give (the default OCI isolation then fails); --pull=never: the bases are local.
isolation=chroot
if "${BUILDAH[@]}" from --quiet --pull=never --name clef-isolation-probe docker.io/library/debian:12-slim >/dev/null 2>&1 &&
   "${BUILDAH[@]}" run --isolation oci clef-isolation-probe -- true >/dev/null 2>&1; then
  isolation=oci
fi
"${BUILDAH[@]}" rm clef-isolation-probe >/dev/null 2>&1 || true
log "building $IMAGE (isolation $isolation)"
start=$(date +%s)
"${BUILDAH[@]}" build --pull=never --isolation "$isolation" -f "$CONTAINERFILE" -t "$IMAGE" .
log "built $IMAGE in $(( $(date +%s) - start )) s"

# Export: an OCI archive any OCI tool loads (podman load, skopeo copy, ctr import).
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
"${BUILDAH[@]}" push --quiet "$IMAGE" "oci-archive:$OUT:$IMAGE" >/dev/null
echo "image: $IMAGE"
echo "archive: $OUT $(stat -c %s "$OUT") bytes ($(du -h "$OUT" | cut -f1))"
echo "image id: $("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE")"
# the manifest's digest as the archive's index.json records it (what a registry would show)
echo "manifest digest: $(tar -xOf "$OUT" index.json | grep -o '"digest":"sha256:[0-9a-f]*"' | head -1 | cut -d'"' -f4)"
