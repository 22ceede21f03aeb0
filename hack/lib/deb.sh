# shellcheck shell=bash
# Sourced by hack's scripts that install Debian packages (hack/test.sh, hack/image.sh, hack/realnode.sh).

# deb_version PACKAGE PINNED: the version of a Debian package to install. The pin of hack/versions.sh
# when the archive offers it (or it is installed); else the archive's candidate, with a warning:
# Debian's archives keep only a package's newest version (bookworm-security replaces Chromium's
# every few weeks), and a fresh machine must not fail because a pin went stale. Run after
# `apt-get update`. Prints nothing when the archive has no such package.
deb_version() {
  local package=$1 pinned=$2 candidate
  if [[ $(dpkg-query -W -f '${Version}' "$package" 2>/dev/null || true) == "$pinned" ]] \
    || apt-cache madison "$package" 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF -- "$pinned"; then
    echo "$pinned"
    return 0
  fi
  candidate=$(apt-cache policy "$package" 2>/dev/null | awk '$1 == "Candidate:" {print $2}')
  [[ -n $candidate && $candidate != "(none)" ]] || return 0
  echo "warning: Debian no longer offers $package=$pinned; installing its $candidate (update the pin in hack/versions.sh)" >&2
  echo "$candidate"
}
