#!/usr/bin/env bash
# Download the JARs listed in $1 into $2, verifying each against Maven Central's .sha1.
set -euo pipefail
list=$1; dest=$2
repo=${MAVEN_REPO:-https://repo1.maven.org/maven2}
grep -v '^#' "$list" | while IFS=: read -r group artifact version; do
  [ -n "$group" ] || continue
  path="${group//.//}/${artifact}/${version}/${artifact}-${version}.jar"
  curl -fsSL -o "$dest/${artifact}-${version}.jar" "$repo/$path"
  expected=$(curl -fsSL "$repo/$path.sha1" | cut -c1-40)
  echo "$expected  $dest/${artifact}-${version}.jar" | sha1sum -c -
done
